"""An out-of-tree polyrl backend: transformers on the CPU, written to be read.

``plugin`` is what the ``polyrl.backends`` entry point names (registration and the hooks, no torch
import); ``engine`` loads the model and does tokens, scoring, weights and checkpoints;
``generation`` and ``training`` answer ``generate`` and ``train_step``.
"""
