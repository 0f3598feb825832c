"""Data: parallel corpora, the built-in English→French corpus, downloads and batching."""
