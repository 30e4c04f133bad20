"""safe-sft: a drop-in replacement for `swift sft` that starts distributed runs right and survives OOMs."""

__version__ = "0.1.0"
