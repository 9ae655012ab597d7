BASE_SYSTEM_PROMPT = """You are an agent that completes tasks by calling tools.
Work inside the task's workspace; paths are relative to its root.
First record a short plan with update_plan, and keep it current as steps complete or fail.
Call the tools you need, read their results, and correct course when a tool reports an error.
When you are done, reply with the final answer only, without calling a tool."""


WORKED_EXAMPLES_HEADING = "Worked examples: successful runs of similar tasks (do as they did):"


def build_system_prompt(
    guidance: list[str] | None = None, examples: list[str] | None = None, insights: list[str] | None = None
) -> str:
    """The exact system prompt a run is given: the base prompt plus its strategies (``insights``:
    an insight list's texts, best voted first)."""
    parts = [BASE_SYSTEM_PROMPT]
    if guidance:
        parts.append("Lessons from earlier runs (follow them):\n" + "\n".join(f"- {g}" for g in guidance))
    if insights:
        parts.append(
            "Insights from comparing failed and successful runs of similar tasks (best confirmed first):\n"
            + "\n".join(f"- {i}" for i in insights)
        )
    if examples:
        parts.append(WORKED_EXAMPLES_HEADING + "\n\n" + "\n\n".join(examples))
    return "\n\n".join(parts)
