"""`rlvmr-nb coldstart --teacher llm` against a local OpenAI-compatible server: it works
for every env the command offers, gives up on a model that never answers readably after a bounded number
of requests with the first reason in full, and a hung endpoint costs about --llm-timeout, not minutes."""

import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from rlvmr_nb import cli
from rlvmr_nb.coldstart import read_manifest
from rlvmr_nb.coldstart.experts import coldstart_envs
from rlvmr_nb.coldstart.teachers import annotation_prompt
from rlvmr_nb.records import Episode, Step


class _Teacher(BaseHTTPRequestHandler):
    """``mode`` 'good': a valid tagged answer for whatever trajectory is asked about (actions copied from
    the prompt); 'garbage': never a JSON list; 'hang': no answer for a long time."""

    mode = "good"
    requests = 0

    def do_POST(self):  # noqa: N802 - http.server API
        type(self).requests += 1
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.mode == "hang":
            time.sleep(30)
            return
        actions = re.findall(r"^Action: (.*)$", body["messages"][0]["content"], flags=re.M)
        answer = (json.dumps([{"reason": f"<monitor>Step {i} serves the goal.</monitor>", "action": a}
                              for i, a in enumerate(actions)]) if self.mode == "good" else "I cannot help with that.")
        data = json.dumps({"choices": [{"index": 0, "message": {"role": "assistant", "content": answer}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def teacher_server():
    _Teacher.mode, _Teacher.requests = "good", 0
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Teacher)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1", _Teacher
    server.shutdown()
    server.server_close()


def _coldstart(base_url, out, *extra):
    return cli.main(["coldstart", "--env", "lab", "--teacher", "llm", "--llm-model", "m", "--llm-base-url", base_url,
                     "--min-tag-share", "0", "--out", str(out), *extra])


def test_the_annotation_request_exists_for_every_env_the_command_offers():
    for env in coldstart_envs():
        expert = Episode(task_id="t", env=env, task_text="put a thing somewhere.",
                         steps=[Step(t=0, observation="You are in a room.", action="look")], won=True)
        assert "Action: look" in annotation_prompt(expert), env


def test_the_llm_teacher_builds_a_lab_dataset(teacher_server, tmp_path, capsys):
    base_url, _ = teacher_server
    assert _coldstart(base_url, tmp_path / "data", "-n", "2") == 0
    manifest = read_manifest(tmp_path / "data")
    assert manifest["teacher"]["name"] == "llm" and manifest["counts"]["trajectories"] == 2


def test_unreadable_answers_give_up_after_a_bounded_number_of_requests_with_the_first_reason(
        teacher_server, tmp_path, capsys):
    base_url, handler = teacher_server
    handler.mode = "garbage"
    assert _coldstart(base_url, tmp_path / "data", "-n", "1") == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "no readable answer for 3 trajectories in a row" in err
    # the first reason in full: every attempt's error, not cut at 100 characters
    assert re.search(r"First: \S+: no parseable annotation in 5 attempts \(attempt 1: no JSON list in the answer;"
                     r".*attempt 5: no JSON list in the answer\)", err)
    assert handler.requests == 3 * 5


def test_a_hung_endpoint_costs_about_the_llm_timeout(teacher_server, tmp_path, capsys):
    base_url, handler = teacher_server
    handler.mode = "hang"
    started = time.monotonic()
    assert _coldstart(base_url, tmp_path / "data", "-n", "1", "--llm-timeout", "1") == 2
    assert time.monotonic() - started < 8
    err = capsys.readouterr().err
    assert "Traceback" not in err and "rlvmr-nb coldstart: error: LLM teacher endpoint" in err
