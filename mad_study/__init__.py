"""A reproducible study kit for LLM multi-agent debate: MADC, Meta-Debate, UMAD, SVR-MAD, RUMAD

Modules:

- `mad_study.answers`: Read the final answer out of a model's free-text response, grade it against the gold answer, and merge equivalent answers before votes and answer distributions are computed.
- `mad_study.core`: Shared types of the kit. Every paper's method produces, and every paper's metric reads, the same **transcript**: one row per agent turn.
- `mad_study.data`: The eleven benchmarks of the five papers (and MATH's training split, on which UMAD trains): where each lives on the hub, how its rows become `Item`s, deterministic saved subsets, and the small fixtures that let everything run offline."""

__version__ = "0.0.1"
