"""Helpers that only backends use, kept in the core so every backend shares one copy.

``batching`` groups sequences into length buckets for scoring, ``stopping`` ends a generation at a
stop string exactly as every backend must, ``samples`` gives each sample its token budget and its
``Completion``, ``gguf_vocab`` checks a converted GGUF tokenizer against the file's own vocabulary,
``tokens`` picks the pad id and decodes completions, ``reward_text`` renders what a reward model
scores, ``literal_chat`` encodes chats whose text never becomes special tokens, ``checkpoints``
names a checkpoint's missing piece, ``options`` reads a backend's boolean switches and ``versions``
reads installed versions from metadata. Nothing here imports torch, MAX or MLX.
"""
