"""Input readers: each turns one file into RawChunks of sample dicts in Sample.to_dict() form."""
from .base import RawChunk

__all__ = ["RawChunk"]
