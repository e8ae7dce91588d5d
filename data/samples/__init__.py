"""Workers of ``data/generate_samples.py``: one module per compiler family.

Each ``run_*`` function runs inside its own subprocess (the compilers read their dump
flags at start-up), compiles one small model, and returns the figures the compiler's
own APIs give, with the dump files (relative to the job's dump directory) each
figure belongs to.
"""
