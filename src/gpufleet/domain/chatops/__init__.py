"""Chat-ops, pure: the `/gpu` grammar (`commands`), the approval buttons' action ids
(`approvals`) and the Block Kit messages (`blocks`) that the API and the notifier send."""
