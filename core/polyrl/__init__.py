"""polyrl: RL post-training of language models on interchangeable backends."""

__version__ = "0.1.0"
