"""The GPU lifecycle: requests, approval, quotas and pools, placement and granting, and the
bindings that are the truth of who holds which unit when."""
