"""Human stage labels for critic diagnoses (ReVuE, Appendix B.6): a local annotation page.

- `records`: the annotation JSONL (one sampled rollout per line) and its loader.
- `labels`: the append-only label log the page writes as each label is made.
- `sample`: a balanced, seeded sample of an eval run's tool-mode groups (`beacon annotate sample`).
- `server`: the FastAPI app behind `beacon annotate FILE.jsonl`.
- `sources`: label sources for `beacon critic agreement` (agreement, κ, confusion matrix).

Format and workflow: docs/annotate.md.
"""
