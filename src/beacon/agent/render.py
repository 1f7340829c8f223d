"""A trajectory as a person reads it: question, reasoning, code, observations, answer."""

from __future__ import annotations

import typer

from beacon.types import Trajectory

_STYLES = {
    "prompt": dict(fg=typer.colors.BLUE),
    "text": {},
    "code": dict(fg=typer.colors.GREEN),
    "observation": dict(fg=typer.colors.YELLOW),
}


def render_trajectory(traj: Trajectory, color: bool = True, show_prompt: bool = False) -> str:
    """Readable multi-line text; sections are headed and colored when `color` is set."""
    lines: list[str] = []

    def section(title: str, body: str, style: str) -> None:
        head = f"── {title} " + "─" * max(0, 60 - len(title))
        lines.append(typer.style(head, bold=True) if color else head)
        text = body.rstrip()
        lines.append(typer.style(text, **_STYLES[style]) if color and text else text)

    for segment in traj.segments:
        if segment.role == "prompt":
            if show_prompt:
                section("prompt", segment.text, "prompt")
        elif segment.role == "observation":
            images = f" ({len(segment.images)} image(s))" if segment.images else ""
            section("observation" + images, segment.text, "observation")
        else:
            title = "code" if segment.kind == "code" else "model"
            section(title, segment.text, segment.kind if segment.kind == "code" else "text")
    summary = (
        f"answer: {traj.final_answer!r}  finish: {traj.finish_reason}  "
        f"tool calls: {traj.num_tool_calls}  generated tokens: {traj.response_tokens}  "
        f"time: {traj.wall_time_s:.2f}s"
    )
    if traj.gate is not None:
        gate = traj.gate
        side = "<" if gate.path == "notool" else ">="
        summary += f"  gate: p_tool={gate.p_tool:.3g} {side} {gate.threshold:g} -> {gate.path}"
    if traj.error:
        summary += f"  error: {traj.error}"
    lines.append(typer.style(summary, bold=True) if color else summary)
    return "\n".join(lines)
