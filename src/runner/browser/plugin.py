# Written by the yy Runner into its Hermes's home (plugins/yy_browser): Hermes's browser
# tools, served by the Runner's managed browser (docs/browser.md). Each call goes to the
# Runner over its unix socket with the Hermes session it belongs to; the Runner decides
# whether that session's turn may use a browser, and whose. Nothing here holds a secret.
import base64
import json
import os
import socket

SOCKET_ENV = "YY_BROWSER_SOCKET"
# A screenshot is the largest answer; the Runner never sends more.
MAX_ANSWER = 32 * 1024 * 1024
# Opening a page takes at most 30 s, installing Chromium on first use a few minutes.
TIMEOUT_S = 600

# Hermes's own browser tools that the managed browser does not serve: refused, saying
# what to use instead, so that no call reaches a browser outside yy's egress proxy.
NOT_SERVED = ("browser_get_images", "browser_console", "browser_cdp", "browser_dialog")


def _session_ids():
    try:
        from gateway.session_context import get_session_env
        return get_session_env("HERMES_UI_SESSION_ID", ""), get_session_env("HERMES_SESSION_KEY", "")
    except Exception:
        return "", ""


def _call(tool, args):
    path = os.environ.get(SOCKET_ENV, "")
    if not path:
        return {"ok": False, "error": "the managed browser is off on this Runner (runner.json has \"browser\": {\"enabled\": false})"}
    session, key = _session_ids()
    request = json.dumps({"v": 1, "session": session, "session_key": key, "tool": tool, "args": args or {}})
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(TIMEOUT_S)
            s.connect(path)
            s.sendall(request.encode() + b"\n")
            chunks, size = [], 0
            while True:
                chunk = s.recv(1 << 16)
                if not chunk:
                    break
                size += len(chunk)
                if size > MAX_ANSWER:
                    return {"ok": False, "error": "the Runner's answer was too large"}
                chunks.append(chunk)
        return json.loads(b"".join(chunks).decode())
    except Exception as e:  # the Runner went away, or timed out
        return {"ok": False, "error": "the yy Runner's browser did not answer: %s" % e}


def _result(answer):
    if not answer.get("ok"):
        return json.dumps({"success": False, "error": answer.get("error", "failed")})
    text = answer.get("text", "")
    png = answer.get("png_base64")
    if png:
        return {
            "_multimodal": True,
            "content": [
                {"type": "text", "text": text},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64," + png}},
            ],
            "text_summary": text,
        }
    return json.dumps({"success": True, "result": text})


def _handler(tool):
    return lambda args, **kw: _result(_call(tool, args))


def _schema(name, description, properties, required=()):
    return {
        "name": name,
        "description": description,
        "parameters": {"type": "object", "properties": properties, "required": list(required)},
    }


def register(ctx):
    try:
        from tools.browser_tool import _BROWSER_SCHEMA_MAP as hermes_schemas
    except Exception:
        hermes_schemas = {}
    own = {
        "browser_navigate": _schema("browser_navigate", "Open a URL (http or https) in your browser.",
                                    {"url": {"type": "string"}}, ["url"]),
        "browser_snapshot": _schema("browser_snapshot", "Read the page: its text, links, and the elements you can act on, each with a ref like @e3.",
                                    {"full": {"type": "boolean"}}),
        "browser_click": _schema("browser_click", "Click the element with this ref from the last snapshot.",
                                 {"ref": {"type": "string"}}, ["ref"]),
        "browser_type": _schema("browser_type", "Click the element with this ref and type text into it.",
                                {"ref": {"type": "string"}, "text": {"type": "string"}}, ["ref", "text"]),
        "browser_scroll": _schema("browser_scroll", "Scroll the page up or down.",
                                  {"direction": {"type": "string", "enum": ["up", "down"]}}, ["direction"]),
        "browser_back": _schema("browser_back", "Go back to the previous page.", {}),
        "browser_press": _schema("browser_press", "Press a key (Enter, Tab, Escape, ArrowDown, ...).",
                                 {"key": {"type": "string"}}, ["key"]),
        "browser_vision": _schema("browser_vision", "Take a screenshot of the page to look at it.",
                                  {"question": {"type": "string"}}),
    }
    for name, schema in own.items():
        ctx.register_tool(name=name, toolset="browser", schema=hermes_schemas.get(name, schema),
                          handler=_handler(name), override=True)
    ctx.register_tool(
        name="browser_screenshot", toolset="browser",
        schema=_schema("browser_screenshot", "Take a screenshot of the page; returns the image.", {}),
        handler=_handler("browser_screenshot"))
    ctx.register_tool(
        name="browser_tabs", toolset="browser",
        schema=_schema("browser_tabs", "List, open, switch to or close tabs. action: list, new (with url), select or close (with index).",
                       {"action": {"type": "string", "enum": ["list", "new", "select", "close"]},
                        "index": {"type": "integer"}, "url": {"type": "string"}}, ["action"]),
        handler=_handler("browser_tabs"))
    for name in NOT_SERVED:
        if name in hermes_schemas:
            ctx.register_tool(name=name, toolset="browser", schema=hermes_schemas[name],
                              handler=lambda args, _n=name, **kw: json.dumps({
                                  "success": False,
                                  "error": "%s is not available in yy's managed browser: use browser_snapshot, browser_screenshot or browser_navigate" % _n}),
                              override=True)
