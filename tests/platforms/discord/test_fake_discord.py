"""The fake Discord speaks REST and the gateway well enough for the real discord.py: every
test drives a plain `discord.Client` over real sockets and checks what it parses, sends,
retries and resumes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

import discord
import pytest
from discord import app_commands

from tests.harness.discord_client import logged_in
from tests.harness.discord_payloads import INTENT_MESSAGE_CONTENT
from tests.harness.fake_discord import APP_ID, BOT_ID, FakeDiscord

USER = "700000000000000001"
pytestmark = pytest.mark.timeout(20)


@dataclass
class World:
    fake: FakeDiscord
    guild: str
    channel: str
    thread: str
    dm: str


class Recorder(discord.Client):
    """A Client that keeps every message not its own, with one slash command tree."""

    def __init__(self, heartbeat_timeout: float, members: bool = False) -> None:
        intents = discord.Intents.default()
        intents.message_content = True
        intents.members = members
        super().__init__(intents=intents, guild_ready_timeout=0.05,
                         heartbeat_timeout=heartbeat_timeout)
        self.received: list[discord.Message] = []
        self.errors: list[discord.HTTPException] = []
        self.resumed = 0
        self._changed = asyncio.Condition()
        self.tree = app_commands.CommandTree(self)

    async def before_identify_hook(self, shard_id: int | None, *, initial: bool = False) -> None:
        """discord.py sleeps 5 s before every IDENTIFY but the first; not in tests."""

    async def on_resumed(self) -> None:
        self.resumed += 1
        await self.note()

    async def on_message(self, message: discord.Message) -> None:
        if message.author.id != int(BOT_ID):
            self.received.append(message)
        await self.note()

    async def on_socket_event_type(self, event: str) -> None:
        await self.note()  # runs after the event was parsed into the cache

    async def note(self, error: discord.HTTPException | None = None) -> None:
        if error is not None:
            self.errors.append(error)
        async with self._changed:
            self._changed.notify_all()

    async def until(self, done: Callable[[], bool],
                    timeout: float = 5.0) -> None:  # noqa: ASYNC109
        async with asyncio.timeout(timeout), self._changed:
            await self._changed.wait_for(done)

    def contents(self) -> list[str]:
        return [m.content for m in self.received]


@asynccontextmanager
async def connected(fake: FakeDiscord, heartbeat_timeout: float = 2.0,
                    setup: Callable[[Recorder], None] | None = None, *,
                    members: bool = False) -> AsyncIterator[Recorder]:
    """Logged in, connected and ready; always closed."""
    client = Recorder(heartbeat_timeout, members)
    if setup is not None:
        setup(client)
    async with logged_in(fake, client):
        yield client


@pytest.fixture
def world(discord_endpoints: FakeDiscord) -> World:
    fake = discord_endpoints
    fake.heartbeat_interval_ms = 250
    guild = fake.add_guild("home")
    channel = fake.add_channel(guild, "general")
    fake.add_member(guild, USER, name="alice")
    thread = fake.add_thread(channel, owner_id=USER)
    return World(fake, guild, channel, thread, fake.dm_channel(USER))


@pytest.fixture
async def client(world: World) -> AsyncIterator[Recorder]:
    async with connected(world.fake) as client:
        yield client


# --- handshake and events in --------------------------------------------------------------
async def test_login_identify_and_the_guild_cache(world: World, client: Recorder) -> None:
    fake = world.fake
    assert [c.path for c in fake.calls[:2]] == ["/api/v10/users/@me",
                                                "/api/v10/oauth2/applications/@me"]
    assert client.user is not None and client.user.id == int(BOT_ID)
    assert client.user.name == "threadline" and client.application_id == int(APP_ID)
    assert fake.identifies == 1 and fake.connections == 1
    assert fake.identify_payloads[0]["intents"] & INTENT_MESSAGE_CONTENT
    guild = client.get_guild(int(world.guild))
    assert guild is not None and guild.name == "home" and guild.me is not None
    assert [c.name for c in guild.text_channels] == ["general"]
    assert guild.get_thread(int(world.thread)) is not None
    assert not guild.me.guild_permissions.manage_messages
    assert guild.default_role.permissions.send_messages


async def test_members_come_by_chunks_with_the_members_intent(world: World) -> None:
    async with connected(world.fake) as plain:
        guild = plain.get_guild(int(world.guild))
        assert guild is not None and guild.get_member(int(USER)) is None  # bot only
    async with connected(world.fake, members=True) as client:
        guild = client.get_guild(int(world.guild))
        assert guild is not None and guild.chunked
        member = guild.get_member(int(USER))
        assert member is not None and member.name == "alice"


async def test_guild_and_dm_messages_reach_on_message(world: World, client: Recorder) -> None:
    fake = world.fake
    await fake.user_message(world.channel, "hello bot", author_id=USER, mentions_bot=True)
    await fake.user_message(world.dm, "psst", author_id=USER)
    await client.until(lambda: len(client.received) == 2)
    in_guild, in_dm = client.received
    assert in_guild.content == f"<@{BOT_ID}> hello bot" and in_guild.guild is not None
    assert isinstance(in_guild.author, discord.Member) and in_guild.author.id == int(USER)
    assert client.user in in_guild.mentions
    assert in_dm.guild is None and isinstance(in_dm.channel, discord.DMChannel)


async def test_a_thread_added_while_connected_is_announced(world: World,
                                                           client: Recorder) -> None:
    thread = world.fake.add_thread(world.channel, name="later")
    await client.until(lambda: client.get_channel(int(thread)) is not None)
    await world.fake.user_message(thread, "in the thread", author_id=USER)
    await client.until(lambda: client.contents() == ["in the thread"])
    assert isinstance(client.received[0].channel, discord.Thread)


# --- REST out -----------------------------------------------------------------------------
async def test_a_reply_lands_in_the_outbox_with_its_mentions_and_reference(
        world: World, client: Recorder) -> None:
    fake = world.fake
    await fake.user_message(world.channel, "question", author_id=USER)
    await client.until(lambda: len(client.received) == 1)
    sent = await client.received[0].reply("answer", mention_author=False,
                                          allowed_mentions=discord.AllowedMentions.none())
    [out] = await fake.wait_for_messages(world.channel, 1)
    assert sent.id == int(out.id) and out.content == "answer" and out.via == "channel"
    assert out.allowed_mentions == {"parse": [], "replied_user": False}
    assert out.message_reference is not None
    assert int(out.message_reference["message_id"]) == client.received[0].id  # sent as int
    assert sent.reference is not None and sent.reference.resolved is not None


async def test_content_over_2000_characters_is_a_400(world: World, client: Recorder) -> None:
    channel = client.get_channel(int(world.channel))
    assert isinstance(channel, discord.TextChannel)
    with pytest.raises(discord.HTTPException) as caught:
        await channel.send("x" * 2001)
    assert caught.value.status == 400 and caught.value.code == 50035
    await channel.send("x" * 2000)
    assert [len(m.content) for m in world.fake.messages()] == [2000]


async def test_a_429_is_waited_out_and_the_message_arrives_once(world: World,
                                                                client: Recorder) -> None:
    fake = world.fake
    fake.rate_limit_next(f"/channels/{world.channel}/messages", 0.3)
    channel = client.get_channel(int(world.channel))
    assert isinstance(channel, discord.TextChannel)
    started = time.monotonic()
    await channel.send("once")
    assert time.monotonic() - started >= 0.3
    assert [m.content for m in fake.messages(world.channel)] == ["once"]
    assert len(fake.rate_limited) == 1
    assert len(fake.calls_to(f"/channels/{world.channel}/messages")) == 2


# --- gateway: reconnects ------------------------------------------------------------------
async def test_op7_resumes_and_replays_what_was_sent_meanwhile(world: World,
                                                               client: Recorder) -> None:
    fake = world.fake
    await fake.reconnect()
    await fake.user_message(world.channel, "during the reconnect", author_id=USER)
    await fake.wait_resumed(1)
    await client.until(lambda: client.contents() == ["during the reconnect"])
    await asyncio.sleep(0.1)
    assert client.contents() == ["during the reconnect"] and client.resumed == 1
    assert (fake.identifies, fake.resumes, fake.connections) == (1, 1, 2)


async def test_a_zombie_connection_is_dropped_by_the_client_which_resumes(
        world: World) -> None:
    fake = world.fake
    fake.heartbeat_interval_ms = 200
    async with connected(fake, heartbeat_timeout=1.0) as client:
        await fake.zombie()
        await fake.user_message(world.channel, "while the line is silent", author_id=USER)
        await fake.wait_resumed(1, timeout=5)
        await client.until(lambda: client.contents() == ["while the line is silent"])
        await asyncio.sleep(0.1)
        assert client.contents() == ["while the line is silent"]
        assert fake.identifies == 1


async def test_a_dropped_socket_resumes(world: World, client: Recorder) -> None:
    await world.fake.drop()
    await world.fake.wait_resumed(1)
    await world.fake.user_message(world.dm, "back", author_id=USER)
    await client.until(lambda: client.contents() == ["back"])
    assert world.fake.identifies == 1


async def test_op9_not_resumable_identifies_again(world: World, client: Recorder) -> None:
    fake = world.fake
    await fake.invalidate_session(resumable=False)
    await fake.wait_identified(2)
    await fake.user_message(world.dm, "new session", author_id=USER)
    await client.until(lambda: client.contents() == ["new session"])
    assert fake.resumes == 0 and len(fake.sessions) == 1


async def test_a_bad_token_fails_login(discord_endpoints: FakeDiscord) -> None:
    client = discord.Client(intents=discord.Intents.default())
    try:
        with pytest.raises(discord.LoginFailure):
            await client.login("not-the-token")
    finally:
        await client.close()


# --- slash commands -----------------------------------------------------------------------
def commands(client: Recorder) -> None:
    @client.tree.command(description="Ask something")
    async def ask(interaction: discord.Interaction, question: str) -> None:
        await interaction.response.send_message(f"you asked: {question}", ephemeral=True)

    @client.tree.command(description="Takes a while")
    async def slow(interaction: discord.Interaction) -> None:
        await interaction.response.defer()
        await interaction.followup.send("done")

    @client.tree.command(description="Follows up too early, then edits its original")
    async def edit(interaction: discord.Interaction) -> None:
        try:
            await interaction.followup.send("too early")
        except discord.HTTPException as error:
            await client.note(error)
        await interaction.response.defer(ephemeral=True)
        await interaction.edit_original_response(content="edited")
        assert (await interaction.original_response()).content == "edited"
        await interaction.delete_original_response()
        await client.note()

    @client.tree.command(description="Answers twice, or late")
    async def again(interaction: discord.Interaction, delay: str = "0") -> None:
        await asyncio.sleep(float(delay))
        try:
            await interaction.response.send_message("first")
            await discord.InteractionResponse(interaction).send_message("second")
        except discord.HTTPException as error:
            await client.note(error)


@pytest.fixture
async def commander(world: World) -> AsyncIterator[Recorder]:
    async with connected(world.fake, setup=commands) as client:
        synced = await client.tree.sync()
        assert {c.name for c in synced} == {"ask", "slow", "edit", "again"}
        yield client


async def test_a_synced_command_answers_at_once(world: World, commander: Recorder) -> None:
    fake = world.fake
    assert len(fake.command_syncs) == 1
    interaction = await fake.interaction("ask", {"question": "why"}, world.channel)
    callback = await fake.wait_for_callback(interaction)
    assert (callback.type, callback.status) == (4, 200) and callback.elapsed < 3.0
    assert callback.data["flags"] == 64
    [out] = await fake.wait_for_messages(world.channel, 1)
    assert (out.via, out.content, out.ephemeral) == ("callback", "you asked: why", True)


async def test_a_deferred_command_follows_up(world: World, commander: Recorder) -> None:
    fake = world.fake
    interaction = await fake.interaction("slow", None, world.dm)
    assert (await fake.wait_for_callback(interaction)).type == 5
    [follow_up] = await fake.wait_for_followups(interaction, 1)
    assert follow_up.content == "done" and follow_up.channel_id == world.dm


async def test_webhooks_need_an_acknowledgement_and_then_edit_the_original(
        world: World, commander: Recorder) -> None:
    fake = world.fake
    interaction = await fake.interaction("edit", None, world.channel)
    await commander.until(lambda: len(fake.deleted) == 1)
    assert [e.code for e in commander.errors] == [10015]  # Unknown Webhook
    [edited] = fake.messages(world.channel)
    assert (edited.via, edited.content, edited.ephemeral) == ("edit", "edited", True)
    assert edited.interaction_id == interaction and fake.deleted == [edited.id]


async def test_a_second_callback_is_already_acknowledged(world: World,
                                                         commander: Recorder) -> None:
    fake = world.fake
    await fake.interaction("again", None, world.channel)
    await commander.until(lambda: len(commander.errors) == 1)
    assert commander.errors[0].code == 40060
    assert [(c.status, c.code) for c in fake.callbacks] == [(200, None), (400, 40060)]


async def test_a_callback_after_the_deadline_is_an_unknown_interaction(
        world: World, commander: Recorder) -> None:
    fake = world.fake
    fake.interaction_deadline_s = 0.2
    await fake.interaction("again", {"delay": "0.3"}, world.channel)
    await commander.until(lambda: len(commander.errors) == 1)
    assert isinstance(commander.errors[0], discord.NotFound)
    assert commander.errors[0].code == 10062
    assert fake.messages() == []
