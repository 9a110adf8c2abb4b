"""The search: the recommender (cheapest hardware and layout that fit and meet the deadline) and the explore views."""
