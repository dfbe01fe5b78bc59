"""Pictures MCP tools return, kept and shown to the model like pictures people send.

The bytes are made acceptable to vision APIs by the same reader (`model_image`), in a
worker process of their own within the attachments' time and memory budget: a server's
picture may come from anywhere. The file is kept in the chat's attachment directory and
the tool's result holds an attachment part naming it; each request then presents it as
it presents a user's picture (agent/attachments/present.py).
"""

from __future__ import annotations

import logging
from typing import Any

from agent.attachments.files import AttachmentFiles
from agent.attachments.images import model_image
from agent.attachments.parts import attachment_part
from agent.attachments.text import Unreadable
from agent.tools.mcp.results import Picture
from agent.tools.mcp.tools import Keep
from gateway.offload import WorkerPool, WorkFailed

log = logging.getLogger(__name__)


class ToolPictures:
    def __init__(self, files: AttachmentFiles, pool: WorkerPool, budget_s: float) -> None:
        self.files = files
        self.pool = pool
        self.budget_s = budget_s

    def keeper(self, chat_key: str) -> Keep:
        async def keep(picture: Picture, tool: str) -> dict[str, Any] | str:
            return await self.keep(chat_key, picture, tool)

        return keep

    async def keep(self, chat_key: str, picture: Picture, tool: str) -> dict[str, Any] | str:
        """An attachment part for the tool's result, or words saying why there is none."""
        try:
            image = await self.pool.run(model_image, picture.data, budget_s=self.budget_s)
        except Unreadable as exc:
            return f"[{tool} returned a picture that could not be read: {exc}]"
        except WorkFailed as exc:
            log.warning("mcp: a picture from %s was not read: %s", tool, exc)
            return f"[{tool} returned a picture too costly to read]"
        suffix = image.mime.partition("/")[2]
        ref = await self.files.keep(chat_key, image.data, suffix)
        return attachment_part("image", file=ref, name=f"{tool}.{suffix}", mime=image.mime,
                               size=len(image.data), text=f"picture returned by {tool}",
                               width=image.width, height=image.height)

    async def aclose(self) -> None:
        await self.pool.close()
