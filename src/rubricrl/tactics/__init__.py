"""Tactic diversity: taxonomies, a classifier for supporter turns, stickiness, novelty rewards."""
