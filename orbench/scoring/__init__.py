"""Deciding what a reply is: the keyword refusal matchers, the cascade, the judge's verdict,
strict label parsing, the outcome words and the judge cards."""
