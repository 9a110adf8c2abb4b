"""The plan and its models: every setting of a run, validated, and its forms (dict, YAML, share link)."""
