import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# A model small enough to work out by hand (see test_memory.py for the arithmetic).
TINY = {
    "num_layers": 2,
    "hidden_size": 64,
    "num_attention_heads": 4,
    "num_kv_heads": 2,
    "intermediate_size": 128,
    "vocab_size": 1000,
}
