"""The JSON API (/api/v1/): per-user tokens, the same services, selectors and forms as the pages."""
