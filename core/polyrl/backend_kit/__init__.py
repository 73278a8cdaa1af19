"""Helpers that only backends use, kept in the core so every backend shares one copy.

``batching`` groups sequences into length buckets for scoring, ``stopping`` ends a generation at a
stop string exactly as every backend must, ``gguf_vocab`` checks a converted GGUF tokenizer
against the file's own vocabulary. Nothing here imports torch, MAX or MLX.
"""
