"""`python tests/snapshot.py` as a script: the checkout's planner and bench/ first on sys.path, the entries that
`pythonpath` in pyproject.toml gives the tests under pytest."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]
