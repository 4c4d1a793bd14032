"""A reproducible study kit for LLM multi-agent debate: MADC, Meta-Debate, UMAD, SVR-MAD, RUMAD"""

__version__ = "0.0.1"
