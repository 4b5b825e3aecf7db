"""provision: turn fresh NVIDIA GPU machines into verified deep-learning hosts."""

__version__ = "0.1.0"
