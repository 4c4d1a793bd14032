"""A reproducible study kit for LLM multi-agent debate: MADC, Meta-Debate, UMAD, SVR-MAD, RUMAD

Modules:

- `mad_study.core`: Shared types of the kit. Every paper's method produces, and every paper's metric reads, the same **transcript**: one row per agent turn."""

__version__ = "0.0.1"
