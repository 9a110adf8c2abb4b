"""Text forms of estimates and recommendations: JSON-ready dicts, YAML and tables."""
