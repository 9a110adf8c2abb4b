"""VRAM Planner: itemized per-GPU memory of training a language model, and whether it fits."""

from planner.errors import PlanError
from planner.memory import Estimate, Item, estimate
from planner.plan.codec import plan_from_dict, plan_to_dict
from planner.plan.config import Plan

__all__ = ["Estimate", "Item", "Plan", "PlanError", "estimate", "plan_from_dict", "plan_to_dict"]
