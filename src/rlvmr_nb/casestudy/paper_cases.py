"""The paper's two case-study transcripts as episode excerpts, to show beside episodes of one's own runs."""

from __future__ import annotations

from ..records import Episode, Step


def _excerpt_step(t: int, action: str, *, tag: str | None = None, feedback: str = "", admissible: bool = True) -> Step:
    return Step(t=t, observation="", output="", tag=tag, action=action, valid=True, admissible=admissible,
                feedback=feedback)


def paper_case_studies() -> dict[str, Episode]:
    """The paper's two case-study transcripts (paper §2.2 and §4.2) as episode excerpts.

    Only what the paper prints is filled in: the steps' numbers (``t`` = paper step − 1), tags,
    actions and the "Nothing happens." answers. The agents' sentences, the other observations and
    the episodes' outcomes are not printed, so reasoning and those feedbacks are empty and
    ``info["excerpt"]`` is True (renderers then show no outcome).

    * ``"grpo_loop"`` — §2.2, a GRPO agent on the L2 task "put two keychains in safe": after taking
      keychain 1 at dresser 1 it sends "go to dresser 1" at steps 8-10, each answered "Nothing
      happens.", then the inadmissible "move keychain 1 to safe 1".
    * ``"rlvmr_reflection"`` — §4.2, an RLVMR agent on "find two soapbars and put them in cabinet",
      steps 13-18: a hallucinated "examine soapbar 2" fails, a ``<reflection>`` step checks the
      inventory, and the agent goes back to monitoring and exploring.
    """
    nothing = "Nothing happens."
    loop_steps = [_excerpt_step(t, "go to dresser 1", feedback=nothing) for t in (7, 8, 9)]
    loop_steps.append(_excerpt_step(10, "move keychain 1 to safe 1", feedback=nothing, admissible=False))
    grpo = Episode(
        task_id="paper §2.2", env="alfworld", split="L2", task_type="pick_two_obj_and_place",
        task_text="put two keychains in safe.", episode_id="paper-grpo-loop", steps=loop_steps,
        info={"excerpt": True, "method": "GRPO",
              "source": "RLVMR paper §2.2 case study; steps 8-11 as printed (after taking keychain 1 at dresser 1)"},
    )
    rlvmr_steps = [
        _excerpt_step(12, "go to toilet 1", tag="explore"),
        _excerpt_step(13, "examine soapbar 2", tag="monitor", feedback=nothing, admissible=False),
        _excerpt_step(14, "inventory", tag="reflection"),
        _excerpt_step(15, "go to countertop 1", tag="monitor"),
        _excerpt_step(16, "go to toiletpaperhanger 1", tag="explore"),
        _excerpt_step(17, "go to handtowelholder 1", tag="explore"),
    ]
    rlvmr = Episode(
        task_id="paper §4.2", env="alfworld", task_type="pick_two_obj_and_place",
        task_text="find two soapbars and put them in cabinet.", episode_id="paper-rlvmr-reflection",
        steps=rlvmr_steps,
        info={"excerpt": True, "method": "RLVMR",
              "source": "RLVMR paper §4.2 case study; steps 13-18 as printed (examine soapbar 2 is hallucinated)"},
    )
    return {"grpo_loop": grpo, "rlvmr_reflection": rlvmr}
