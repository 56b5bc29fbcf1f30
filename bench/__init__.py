"""The benchmarks (``make bench`` and its siblings): each prints the project's figure beside
a reference measured in the same run and their ratio (BENCHMARKS.md). Not part of the
product; it may import anything of the project and ``support``."""
