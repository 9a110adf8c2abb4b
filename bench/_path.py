"""The checkout first on sys.path. `python bench/x.py` puts bench/ first, so a bench finds its siblings (`stats`,
`accuracy`) by name; importing this module before `planner` puts the checkout above any installed copy, so a bench
measures the code beside it. Under pytest, `pythonpath` in pyproject.toml gives the tests the same two entries."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
