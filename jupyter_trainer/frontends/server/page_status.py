"""The kernel's status as JupyterLab and Notebook 7 show it: the cell's, not a widget's.

The page takes the kernel's status from every status message on IOPub, except those answering
a request of a type its page config lists as untracked. With comms over subshells (JupyterLab
4.4 and later with ipykernel 7), the page asks the kernel for a subshell for a widget's comm
(``create_subshell_request``) and sends the widget's messages there (``comm_msg``); the kernel
answers each with busy, then idle. Those idles say the subshell is free, not the cell: a
``%%train`` cell waiting on its run showed the kernel "Idle" from the moment its run view was
displayed, and again after each click in it. So the page is told to leave them untracked too.
Only the page's reading changes: the server's own activity tracking (culling) is left as it is.
"""

from __future__ import annotations

from typing import Any

UNTRACKED = (
    "comm_msg",
    "create_subshell_request",
    "delete_subshell_request",
    "list_subshell_request",
)


def keep_status_to_cells(web_app: Any) -> None:
    """Add ``UNTRACKED`` to the page config's ``untracked_message_types`` of every page the
    server renders (JupyterLab's and Notebook 7's), after any page config hook already set."""
    earlier = web_app.settings.get("page_config_hook")

    def hook(handler: Any, page_config: dict[str, Any]) -> dict[str, Any]:
        if earlier is not None:
            page_config = earlier(handler, page_config)
        listed = list(page_config.get("untracked_message_types") or [])
        page_config["untracked_message_types"] = listed + [t for t in UNTRACKED if t not in listed]
        return page_config

    web_app.settings["page_config_hook"] = hook
