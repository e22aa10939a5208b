"""Slack's documented Block Kit limits, checked on a whole message (a test helper)."""

from __future__ import annotations

from typing import Any

LIMITS = {"blocks": 50, "header": 150, "section": 3000, "fields": 10, "field": 2000,
          "context": 10, "actions": 25, "button": 75, "action_id": 255, "value": 2000,
          "block_id": 255}


def check_message(message: dict[str, Any]) -> None:
    """AssertionError naming the first limit the message breaks."""
    assert message["response_type"] in ("ephemeral", "in_channel")
    assert isinstance(message["text"], str) and 0 < len(message["text"]) <= 3000
    blocks = message["blocks"]
    assert 0 < len(blocks) <= LIMITS["blocks"], f"{len(blocks)} blocks"
    for block in blocks:
        assert len(block.get("block_id", "")) <= LIMITS["block_id"]
        CHECKS[block["type"]](block)


def _text(obj: dict[str, Any], kind: str, most: int) -> None:
    assert obj["type"] == kind, obj
    assert 0 < len(obj["text"]) <= most, f"{kind} text of {len(obj['text'])} characters"


def _header(block):
    _text(block["text"], "plain_text", LIMITS["header"])


def _section(block):
    assert "text" in block or "fields" in block
    if "text" in block:
        _text(block["text"], "mrkdwn", LIMITS["section"])
    fields = block.get("fields", [])
    assert len(fields) <= LIMITS["fields"]
    for item in fields:
        _text(item, "mrkdwn", LIMITS["field"])


def _context(block):
    assert 0 < len(block["elements"]) <= LIMITS["context"]
    for element in block["elements"]:
        _text(element, "mrkdwn", LIMITS["section"])


def _actions(block):
    assert 0 < len(block["elements"]) <= LIMITS["actions"]
    for button in block["elements"]:
        assert button["type"] == "button"
        _text(button["text"], "plain_text", LIMITS["button"])
        assert 0 < len(button["action_id"]) <= LIMITS["action_id"]
        assert len(button.get("value", "")) <= LIMITS["value"]
        assert button.get("style") in (None, "primary", "danger")


CHECKS = {"header": _header, "section": _section, "context": _context, "actions": _actions}


def seen_text(message: dict[str, Any]) -> str:
    """Every text a reader of the message sees, joined: its fallback and each text of its
    blocks, however deep."""
    found = [message.get("text", "")]

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("text"), str):
                found.append(node["text"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)
    walk(message.get("blocks", []))
    return "\n".join(found)
