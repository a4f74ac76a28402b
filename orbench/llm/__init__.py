"""Talking to models: the request types, the provider table, the client (cache, pacing,
retries), the providers' batch APIs and the cost estimate."""
