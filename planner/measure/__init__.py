"""Measuring a plan on a GPU: the plan as a run, the run itself (torch), and the served engine."""
