"""The human audit: plan, draw, label and score a blind stratified sample."""
