"""The agent: one episode loop that every job shares (eval, expert data, RL and distillation
rollouts), and the protocols the model speaks.

- `loop.AgentLoop`: runs episodes as independent asyncio tasks over one engine and one sandbox
  (`run_episode`, `astream`; `stream` and `run` are their blocking wrappers).
- `episode.EpisodeState`: the pure state machine of one episode (request -> absorb -> observe),
  which records the token-in, token-out `Trajectory`; `episode.EpisodeSpec` says what to run.
- `formats.Format`: the one owner of a protocol's text: call detection and parsing, answer
  extraction from the model's own words, and rendering of observations (`thyme`, `tool_call`).
- `prompts`: the first turn (system prompt, images, question, Thyme's path and size lines).
- `gate.ToolGate`: the inference gate of `gated` mode: p_tool, the model's probability of
  opening a code block first thing, picks the notool or the tool path for each item.
- `render`: a trajectory as a person reads it.

See docs/agent.md.
"""
