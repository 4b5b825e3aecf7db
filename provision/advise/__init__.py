"""The seed article's advice made executable: cost (rent or buy), GPU sizing, and tuning.

``cost`` and ``gpu`` are pure arithmetic over the knowledge data (prices and GPU memory with their
sources); ``tune_job`` is the measurement job that runs on the target with only the standard
library, torch and (optionally) nvidia-ml-py, and never imports the rest of ``provision``.
"""
