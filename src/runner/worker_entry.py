# The isolated Worker: Hermes's own model loop (AIAgent) with its tool dispatch replaced.
#
# Written by the Runner into its data directory (mode 0700) and run with the Hermes
# Python. It speaks JSON lines with the Runner over its stdin and stdout, and nothing
# else: the model's settings and key arrive in the first message on stdin, every tool call
# goes back to the Runner (which runs it in the agent's computer), and no Hermes host tool
# ever runs here. Hermes's own output goes to stderr.
#
#   Runner -> Worker  {"type": "turn", "session": ..., "model": {...}, "tools": [...], "message": ...,
#                      "history": [...], "system": ...}
#                     {"type": "tool_result", "call_id": ..., "content": ...}
#                       (content: a string, or a {"_multimodal": true, ...} envelope)
#                     {"type": "interrupt"}
#                     {"type": "claim", "log": ...}   (before the first turn: the agent's log)
#                     {"type": "prepare", "session": ..., "model": {...}, "tools": [...], "system": ...}
#                       (builds the agent of the turn that follows, while the computer starts)
#   Worker -> Runner  {"type": "ready", "hermes_version": ...}
#                     {"type": "delta", "text": ...}
#                     {"type": "tool_call", "call_id": ..., "name": ..., "args": {...}}
#                     {"type": "refused", "name": ..., "reason": ...}
#                     {"type": "done", "status": "complete|interrupted|error",
#                      "text": ..., "error": ..., "context_length": ...}
#                       (context_length: the model's context window Hermes settled on)
#
# The model settings may carry "context_length" (the profile's model.context_length, or
# what an earlier Worker of this Runner found by probing the model's server): Hermes then
# takes it from this Worker's own config.yaml instead of probing again.

import hashlib
import json
import os
import queue
import sys
import threading
from collections import OrderedDict

# The protocol owns the original stdin and stdout; anything Hermes prints goes to stderr.
_proto_in = os.fdopen(os.dup(0), "r", encoding="utf-8")
_proto_out = os.fdopen(os.dup(1), "w", encoding="utf-8")
os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
os.dup2(2, 1)
sys.stdout = sys.stderr

_write_lock = threading.Lock()


def send(message):
    line = json.dumps(message, ensure_ascii=False)
    with _write_lock:
        _proto_out.write(line + "\n")
        _proto_out.flush()


def write_config(context_length=None):
    """This Worker's own Hermes configuration, in its private HERMES_HOME. No
    environment probe: it would describe the Python of the Runner's host, where no tool
    of the agent runs (they run in its computer)."""
    lines = ["agent:", "  environment_probe: false"]
    if context_length:
        lines += ["model:", f"  context_length: {int(context_length)}"]
    text = "\n".join(lines) + "\n"
    path = os.path.join(os.environ["HERMES_HOME"], "config.yaml")
    try:
        with open(path, encoding="utf-8") as f:
            if f.read() == text:
                return
    except OSError:
        pass
    temporary = path + ".tmp"
    with open(temporary, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(temporary, path)


write_config()

import ssl  # noqa: E402

_create_default_context = ssl.create_default_context
_shared_contexts = {}


def _shared_default_context(purpose=ssl.Purpose.SERVER_AUTH, *, cafile=None, capath=None, cadata=None):
    """Hermes builds nine HTTPS contexts for every AIAgent, each loading the whole CA
    bundle (about 70 ms apiece). This process only ever talks to the profile's model
    provider, so one context per CA source is shared instead."""
    if cadata is not None or purpose != ssl.Purpose.SERVER_AUTH:
        return _create_default_context(purpose, cafile=cafile, capath=capath, cadata=cadata)
    key = (cafile, capath)
    if key not in _shared_contexts:
        _shared_contexts[key] = _create_default_context(purpose, cafile=cafile, capath=capath)
    return _shared_contexts[key]


ssl.create_default_context = _shared_default_context

import run_agent  # noqa: E402
from run_agent import AIAgent  # noqa: E402
from agent.tool_dispatch_helpers import make_tool_result_message  # noqa: E402

# Hermes describes the machine it runs on (OS, home, working directory) to the model, as
# where its tools run. Here they run in the agent's computer, which the turn's system
# message describes; the Runner's host is none of the model's business.
run_agent.build_environment_hints = lambda: ""
# Paragraphs of Hermes's prompt about this process's host; dropped likewise.
_HOST_PARAGRAPHS = ("Active Hermes profile:",)

try:
    from importlib.metadata import version as _dist_version

    HERMES_VERSION = _dist_version("hermes-agent")
except Exception:  # pragma: no cover - a broken install still reports something
    HERMES_VERSION = "unknown"

_results = queue.Queue()
_current = {"agent": None}
_INTERRUPTED = object()


def _read_forever():
    """Tool results go to the waiting tool call; an interrupt stops the model loop."""
    for line in _proto_in:
        line = line.strip()
        if not line:
            continue
        message = json.loads(line)
        kind = message.get("type")
        if kind == "interrupt":
            agent = _current["agent"]
            if agent is not None:
                agent.interrupt("stopped by the operator")
            _results.put(_INTERRUPTED)
        elif kind == "tool_result":
            _results.put(message)
        elif kind in ("turn", "prepare"):
            _turns.put(message)
        elif kind == "claim":
            claim(message)
    _turns.put(None)
    _results.put(_INTERRUPTED)


_turns = queue.Queue()


def claim(message):
    """Started before any agent needed it, this Worker now serves one: Hermes's output goes
    to that agent's log from here on."""
    fd = os.open(message["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    sys.stderr.flush()
    os.dup2(fd, 2)
    os.dup2(fd, 1)
    os.close(fd)


class WorkerAgent(AIAgent):
    """AIAgent whose every tool call, serial, concurrent, segmented or inline, goes to
    the Runner: this is the one entry all of them pass through."""

    allowed = frozenset()

    def _execute_tool_calls(self, assistant_message, messages, effective_task_id, api_call_count=0):
        for call in assistant_message.tool_calls:
            name = call.function.name
            raw = call.function.arguments
            try:
                args = raw if isinstance(raw, dict) else json.loads(raw or "{}")
            except ValueError:
                args = {}
            if name not in self.allowed:
                content = refusal(name)
            elif self._interrupt_requested_flag():
                content = "not run: the turn was stopped"
            else:
                send({"type": "tool_call", "call_id": call.id, "name": name, "args": args})
                reply = _results.get()
                if reply is _INTERRUPTED:
                    content = "not run: the turn was stopped"
                else:
                    content = reply.get("content", "")
                    if isinstance(content, dict) and content.get("_multimodal") is True:
                        # A screenshot: Hermes decides, like for its own computer_use
                        # tool, whether the model gets the image or the text summary.
                        content.pop("frame_id", None)
                        content = self._tool_result_content_for_active_model(name, content)
            messages.append(make_tool_result_message(name, content, call.id))

    def _build_system_prompt(self, system_message=None):
        prompt = super()._build_system_prompt(system_message)
        return "\n\n".join(p for p in prompt.split("\n\n") if not p.startswith(_HOST_PARAGRAPHS))

    def _repair_tool_call(self, tool_name):
        # Never map an unknown name onto an offered tool: refuse it, and say so.
        refusal(tool_name)
        return None

    def _interrupt_requested_flag(self):
        return bool(getattr(self, "_interrupt_requested", False))


def refusal(name):
    reason = f"tool {name!r} is not available: only this computer's tools may be used"
    send({"type": "refused", "name": name, "reason": reason})
    return json.dumps({"error": reason})


# Agents kept between turns, as Hermes's own gateway keeps one per session: building one
# costs hundreds of milliseconds (configuration, clients, the context-length probe).
# Keyed by everything it was built from; a new session resets its session state.
_agents = OrderedDict()
_MAX_AGENTS = 4


def agent_for(turn):
    model = turn["model"]
    tools = turn.get("tools") or []
    # The profile's agent.max_turns: the most model calls of one turn.
    max_iterations = int(model.get("max_turns") or turn.get("max_iterations") or 30)
    # The window is not part of the key: an agent that probed for it is the one to keep
    # when the next turn brings what it found.
    window = model.get("context_length")
    settings = {k: v for k, v in model.items() if k != "context_length"}
    key = hashlib.sha256(
        json.dumps([settings, tools, max_iterations, turn.get("system")], sort_keys=True).encode()
    ).hexdigest()
    session = turn.get("session")
    entry = _agents.pop(key, None)
    if entry is not None and window and context_length_of(entry[0]) != window:
        entry = None  # built for another window: the profile's changed
    if entry is not None:
        agent, last_session = entry
        if last_session != session:
            try:
                agent.session_id = session or agent.session_id
                agent.reset_session_state()
                agent._cached_system_prompt = None
            except Exception:  # an agent that cannot be reset is built again
                entry = None
    if entry is None:
        agent = build_agent(model, tools, max_iterations)
    _agents[key] = (agent, session)
    while len(_agents) > _MAX_AGENTS:
        _agents.popitem(last=False)
    return agent


def forget(agent):
    for key, (kept, _) in list(_agents.items()):
        if kept is agent:
            del _agents[key]


def build_agent(model, tools, max_iterations):
    write_config(model.get("context_length"))
    agent = WorkerAgent(
        base_url=model.get("base_url"),
        api_key=model.get("api_key"),
        provider=model.get("provider"),
        api_mode=model.get("api_mode"),
        model=model.get("model") or "",
        max_iterations=max_iterations,
        max_tokens=model.get("max_tokens"),
        quiet_mode=True,
        skip_context_files=True,
        skip_memory=True,
        enabled_toolsets=[],
        save_trajectories=False,
        checkpoints_enabled=False,
        stream_delta_callback=lambda text: text and send({"type": "delta", "text": text}),
    )
    if model.get("supports_vision") is not None:
        # The profile's model.supports_vision, which the Worker's private HERMES_HOME
        # does not carry: screenshots reach the model as images only if it sees them.
        vision = bool(model["supports_vision"])
        agent._model_supports_vision = lambda: vision
    # This turn's tools, and nothing else.
    agent.tools = tools
    agent.valid_tool_names = {t["function"]["name"] for t in tools}
    return agent


def run_turn(turn):
    try:
        agent = agent_for(turn)
    except Exception as e:  # settings Hermes refuses (a window below its minimum) end the turn
        send({"type": "done", "status": "error", "text": "", "error": f"{type(e).__name__}: {e}"})
        return
    WorkerAgent.allowed = frozenset(agent.valid_tool_names)
    _current["agent"] = agent
    try:
        result = agent.run_conversation(
            turn["message"],
            system_message=turn.get("system"),
            conversation_history=turn.get("history") or [],
        )
    except Exception as e:  # a broken provider or configuration ends the turn, not the Worker
        forget(agent)
        send({"type": "done", "status": "error", "text": "", "error": f"{type(e).__name__}: {e}"})
        return
    finally:
        _current["agent"] = None
    text = result.get("final_response") or ""
    if result.get("interrupted"):
        status = "interrupted"
    elif result.get("failed") or result.get("error"):
        status = "error"
    else:
        status = "complete"
    if status != "complete":
        # Only an agent whose last turn ended cleanly is used again.
        forget(agent)
    send({"type": "done", "status": status, "text": text, "error": result.get("error"),
          "context_length": context_length_of(agent)})


def context_length_of(agent):
    compressor = getattr(agent, "context_compressor", None)
    length = getattr(compressor, "context_length", None)
    return length if isinstance(length, int) and length > 0 else None


def warm_up():
    """A spare builds one throwaway agent before it says it is ready: the first agent of a
    process costs about half a second more than later ones (imports Hermes defers, caches
    it fills). It has no credentials and never calls anything: the address is a discard
    port on loopback, and it is dropped at once."""
    try:
        agent = build_agent(
            {"base_url": "http://127.0.0.1:9/v1", "api_key": "none", "provider": "custom",
             "api_mode": "chat_completions", "model": "warm-up"},
            [],
            1,
        )
        # What a first turn would import next: the prompt's builders, and the OpenAI
        # client's resources (imported at its first request, about 150 ms).
        agent._build_system_prompt()
        import openai.resources  # noqa: F401
    except Exception as e:  # a failed warm-up only costs the first turn that time
        print(f"warm-up failed: {type(e).__name__}: {e}", file=sys.stderr)


def main():
    if "--spare" in sys.argv[1:]:
        warm_up()
    threading.Thread(target=_read_forever, daemon=True).start()
    send({"type": "ready", "hermes_version": HERMES_VERSION})
    while True:
        turn = _turns.get()
        if turn is None:
            return
        if turn.get("type") == "prepare":
            try:
                agent_for(turn)
            except Exception as e:  # the turn builds it again, and says what fails
                print(f"prepare failed: {type(e).__name__}: {e}", file=sys.stderr)
            continue
        # Results of an earlier turn that arrived late are not this turn's.
        while not _results.empty():
            _results.get_nowait()
        run_turn(turn)


if __name__ == "__main__":
    main()
