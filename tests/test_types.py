"""Trajectories survive one JSON line intact, and their derived counts are right."""

from beacon.types import EngineView, EvidenceState, ImageCrop, Segment, ToolCall, Trajectory


def make_trajectory() -> Trajectory:
    return Trajectory(
        sample_id="s",
        mode="hinted",
        format="thyme",
        segments=[
            Segment(role="prompt", text="Q<img>", token_ids=[1, 2, 3], images=["k0"]),
            Segment(role="generated", text="go <code>", token_ids=[4, 5], logprobs=[-0.1, -0.2]),
            Segment(
                role="generated",
                text="x</code>",
                token_ids=[6, 7, 8],
                kind="code",
                logprobs=[-1.0, -2.0, -3.0],
            ),
            Segment(role="observation", text="<so>1</so>", token_ids=[9], images=["k1"]),
            Segment(
                role="generated",
                text="<answer>1</answer>",
                token_ids=[10],
                logprobs=[0.0],
                engine=EngineView.of(list(range(1, 11)), images=2),
            ),
        ],
        final_answer="1",
        finish_reason="answer",
        tool_calls=[
            ToolCall(
                code="x",
                executed=True,
                ok=True,
                stdout="1",
                images=["k1"],
                image_crops=[ImageCrop(0, (1, 2, 3, 4))],
            )
        ],
        evidence=[EvidenceState(3, 9, 2, 1, 3)],
        original_prompt=Segment(role="prompt", text="Q", token_ids=[1, 3]),
        hint="look left",
    )


def test_json_round_trip_is_exact() -> None:
    traj = make_trajectory()
    line = traj.to_json()
    assert "\n" not in line
    assert Trajectory.from_json(line) == traj


def test_masks_and_counts() -> None:
    traj = make_trajectory()
    assert traj.loss_mask == [0, 0, 0, 1, 1, 1, 1, 1, 0, 1]
    assert traj.token_ids == list(range(1, 11))
    assert traj.response_tokens == 6 and traj.code_tokens == 3
    assert traj.generated_text == "go <code>x</code><answer>1</answer>"
    assert traj.used_tool and traj.num_tool_calls == 1 and traj.attempted_tool_calls == 1
    assert traj.has_token_ids


def test_attempts_do_not_count_as_tool_use() -> None:
    traj = Trajectory(sample_id="s", mode="notool", format="thyme")
    traj.tool_calls = [ToolCall(code="x", executed=False)]
    assert not traj.used_tool and traj.num_tool_calls == 0 and traj.attempted_tool_calls == 1


def test_text_only_segments_are_flagged() -> None:
    traj = Trajectory(sample_id="s", mode="tool", format="thyme")
    traj.segments = [Segment(role="generated", text="hello")]
    assert not traj.has_token_ids
