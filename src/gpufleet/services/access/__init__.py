"""Access: who is asking and what they may see and do — tokens, users and projects, the
principal behind a request, and the audit log every state change writes to."""
