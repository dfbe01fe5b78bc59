"""The fake Discord's edges, each checked with the real discord.py client: system messages,
forwards, deletes, channel history, nonces, fatal gateway closes, application flags,
commands removed on Discord's side, REST outages and late answers.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import discord
import pytest
from discord import app_commands
from discord.http import Route

from tests.harness.discord_client import Watcher, connect_failure, logged_in
from tests.harness.discord_messages import SYSTEM_TYPES
from tests.harness.fake_discord import BOT_ID, FakeDiscord

USER, OTHER, NEWCOMER = "700000000000000001", "700000000000000002", "700000000000000003"
pytestmark = pytest.mark.timeout(30)


@dataclass
class World:
    fake: FakeDiscord
    guild: str
    channel: str
    thread: str
    dm: str


@pytest.fixture
def world(discord_endpoints: FakeDiscord) -> World:
    fake = discord_endpoints
    fake.heartbeat_interval_ms = 250
    guild = fake.add_guild("home")
    channel = fake.add_channel(guild, "general")
    fake.add_member(guild, USER, name="alice")
    fake.add_member(guild, OTHER, name="bob")
    thread = fake.add_thread(channel, owner_id=USER, name="plans")
    return World(fake, guild, channel, thread, fake.dm_channel(USER))


@pytest.fixture
async def client(world: World) -> AsyncIterator[Watcher]:
    async with logged_in(world.fake) as client:
        yield client


def text_channel(client: Watcher, channel_id: str) -> discord.TextChannel:
    channel = client.get_channel(int(channel_id))
    assert isinstance(channel, discord.TextChannel)
    return channel


async def received(client: Watcher, count: int) -> list[discord.Message]:
    await client.until(lambda: len(client.received) >= count)
    return client.received


# --- system messages ----------------------------------------------------------------------
async def test_system_messages_reach_the_client_with_their_type(world: World,
                                                                client: Watcher) -> None:
    fake = world.fake
    in_channel = await fake.user_message(world.channel, "pin me", author_id=USER)
    in_thread = await fake.user_message(world.thread, "pin me too", author_id=USER)
    in_dm = await fake.user_message(world.dm, "and me", author_id=USER)
    group = fake.group_dm([USER, OTHER], "pals")
    await fake.pin_notice(in_channel, by=OTHER)
    await fake.pin_notice(in_thread)
    await fake.pin_notice(in_dm)
    await fake.join_notice(world.channel, NEWCOMER)
    await fake.boost_notice(world.channel, USER, count=2)
    await fake.boost_notice(world.channel, USER, tier=3)
    await fake.thread_created_notice(world.thread)
    await fake.rename_notice(world.thread, "new plans", by=USER)
    await fake.recipient_notice(world.thread, OTHER, by=USER)
    await fake.recipient_notice(group, OTHER, removed=True, by=USER)
    await fake.call_notice(world.dm, by=USER)
    await fake.automod_notice(world.channel, USER, "a bad word")
    await fake.poll_result_notice(world.channel, "Lunch?", by=USER, winner=(1, "pizza", 3),
                                  total_votes=4)
    messages = (await received(client, 16))[3:]

    assert [m.type.name for m in messages] == [
        "pins_add", "pins_add", "pins_add", "new_member", "premium_guild_subscription",
        "premium_guild_tier_3", "thread_created", "channel_name_change", "recipient_add",
        "recipient_remove", "call", "auto_moderation_action", "poll_result"]
    assert all(m.type.value == SYSTEM_TYPES[m.type.name] for m in messages)
    # discord.py counts a poll result as an ordinary message, every other one as a system one
    assert [m.is_system() for m in messages] == [True] * 12 + [False]
    (pin, thread_pin, dm_pin, join, boost, tier3, created, renamed, added, removed, call,
     automod, poll) = messages
    assert pin.reference is not None and pin.reference.message_id == int(in_channel)
    assert pin.system_content == "bob pinned a message to this channel."
    assert isinstance(thread_pin.channel, discord.Thread)
    assert isinstance(dm_pin.channel, discord.DMChannel) and dm_pin.guild is None
    assert fake.stored[in_channel]["pinned"]
    assert isinstance(join.author, discord.Member) and join.author.id == int(NEWCOMER)
    assert boost.system_content == "alice just boosted the server **2** times!"
    assert tier3.system_content.endswith("home has achieved **Level 3!**")
    assert created.reference is not None and created.reference.message_id is None
    assert created.reference.channel_id == int(world.thread)
    assert created.system_content.startswith("alice started a thread: **plans**")
    assert renamed.system_content == "alice changed the channel name: **new plans**"
    assert added.system_content == "alice added bob to the thread."
    assert isinstance(removed.channel, discord.DMChannel)  # discord.py cannot tell a group
    assert [u.id for u in removed.mentions] == [int(OTHER)]
    assert call.call is not None and [u.id for u in call.call.participants] == [int(USER)]
    assert automod.embeds[0].description == "a bad word"
    assert {"rule_name", "keyword"} <= {f.name for f in automod.embeds[0].fields}
    assert poll.system_content == "Alice's poll Lunch? has closed."


async def test_system_messages_are_kept_in_history(world: World, client: Watcher) -> None:
    fake = world.fake
    target = await fake.user_message(world.channel, "pin me", author_id=USER)
    notice = await fake.pin_notice(target)
    history = [m async for m in text_channel(client, world.channel).history(limit=10)]
    assert [(m.id, m.type) for m in history] == [
        (int(notice), discord.MessageType.pins_add), (int(target), discord.MessageType.default)]


# --- forwards -----------------------------------------------------------------------------
async def test_a_forward_carries_a_snapshot_with_its_files(world: World,
                                                           client: Watcher) -> None:
    fake = world.fake
    original = await fake.user_message(world.channel, "look at this", author_id=OTHER,
                                       attachments=[("notes.txt", b"hello notes")])
    await fake.forward_message(world.dm, original, author_id=USER)
    await fake.forward_message(world.channel, content="from elsewhere", author_id=USER,
                               attachments=[("pic.png", b"\x89PNG fake")],
                               source_channel_id="123456789012345678")
    source, forward, elsewhere = await received(client, 3)

    assert forward.content == "" and forward.type is discord.MessageType.default
    assert forward.flags.forwarded and not forward.is_system()
    assert forward.reference is not None
    assert forward.reference.type is discord.MessageReferenceType.forward
    assert forward.reference.message_id == int(original)
    assert forward.reference.channel_id == int(world.channel)
    [snapshot] = forward.message_snapshots
    assert isinstance(snapshot, discord.MessageSnapshot)
    assert (snapshot.content, snapshot.type) == ("look at this", discord.MessageType.default)
    assert abs((snapshot.created_at - source.created_at).total_seconds()) < 1
    [file] = snapshot.attachments
    assert file.filename == "notes.txt" and file.url.startswith(fake.cdn_base)
    assert await file.read() == b"hello notes"
    [other] = elsewhere.message_snapshots
    assert other.content == "from elsewhere" and await other.attachments[0].read() == \
        b"\x89PNG fake"
    assert elsewhere.reference is not None
    assert elsewhere.reference.channel_id == 123456789012345678


# --- deletes ------------------------------------------------------------------------------
async def test_deletes_reach_the_client_and_the_fake_forgets(world: World,
                                                             client: Watcher) -> None:
    fake = world.fake
    one = await fake.user_message(world.channel, "one", author_id=USER,
                                  attachments=[("a.txt", b"a")])
    two = await fake.user_message(world.channel, "two", author_id=USER)
    three = await fake.user_message(world.channel, "three", author_id=USER)
    await received(client, 3)
    await fake.delete_message(one)
    await fake.delete_messages([two, three])
    await client.until(lambda: len(client.bulk_deleted) == 1)

    assert [m.content for m in client.deleted] == ["one"]
    assert [m.content for m in client.bulk_deleted[0]] == ["two", "three"]
    assert client.raw_deletes == [int(one), int(two), int(three)]
    channel = text_channel(client, world.channel)
    for message_id in (one, two, three):
        with pytest.raises(discord.NotFound) as gone:
            await channel.fetch_message(int(message_id))
        assert gone.value.code == 10008
    with pytest.raises(discord.NotFound):  # its file is gone from the CDN too
        await client.deleted[0].attachments[0].read()
    assert [m async for m in channel.history()] == []


# --- channel history ----------------------------------------------------------------------
async def test_history_after_returns_what_was_written_while_offline(world: World) -> None:
    fake = world.fake
    async with logged_in(fake) as first:
        await fake.user_message(world.channel, "before the outage", author_id=USER)
        [seen] = await received(first, 1)
        reply = await seen.reply("answered")
    offline = [await fake.user_message(world.channel, f"offline {i}", author_id=USER,
                                       dispatch=False) for i in range(3)]
    async with logged_in(fake) as client:
        offline.append(await fake.user_message(world.channel, "offline 3", author_id=USER,
                                                dispatch=False))
        await fake.user_message(world.dm, "live", author_id=USER)
        assert [m.content for m in await received(client, 1)] == ["live"]  # only that
        channel = text_channel(client, world.channel)
        after = [m async for m in channel.history(after=reply)]
        newest_first = [m async for m in channel.history(limit=2)]
        before = [m async for m in channel.history(before=discord.Object(int(offline[0])))]
        around = [m async for m in channel.history(around=discord.Object(int(offline[1])),
                                                   limit=3)]

    assert [str(m.id) for m in after] == offline
    assert [m.content for m in after] == [f"offline {i}" for i in range(4)]
    assert [str(m.id) for m in newest_first] == [offline[3], offline[2]]
    assert [m.content for m in before] == ["answered", "before the outage"]
    assert before[0].author.id == int(BOT_ID)
    assert [str(m.id) for m in around] == [offline[2], offline[1], offline[0]]


async def test_history_pages_by_limit(world: World, client: Watcher) -> None:
    fake = world.fake
    ids = [await fake.user_message(world.thread, str(i), author_id=USER, dispatch=False)
           for i in range(120)]
    thread = client.get_channel(int(world.thread))
    assert isinstance(thread, discord.Thread)
    every = [m async for m in thread.history(limit=None, oldest_first=True)]
    assert [str(m.id) for m in every] == ids  # two pages: 100, then 20
    route = Route("GET", "/channels/{channel_id}/messages", channel_id=world.thread)
    default = await client.http.request(route)
    assert [m["id"] for m in default] == ids[::-1][:50]
    for bad in (0, 101):
        with pytest.raises(discord.HTTPException) as refused:
            await client.http.request(route, params={"limit": bad})
        assert (refused.value.status, refused.value.code) == (400, 50035)
    paths = [c.path for c in fake.calls_to(f"/channels/{world.thread}/messages")]
    assert len(paths) == 5


# --- nonces -------------------------------------------------------------------------------
async def test_an_enforced_nonce_returns_the_first_message(world: World,
                                                           client: Watcher) -> None:
    fake = world.fake
    channel = text_channel(client, world.channel)
    first = await channel.send("once", nonce="abc123")  # discord.py sets enforce_nonce
    again = await channel.send("once, retried", nonce="abc123")
    thread = client.get_channel(int(world.thread))
    assert isinstance(thread, discord.Thread)
    elsewhere = await thread.send("other channel", nonce="abc123")
    route = Route("POST", "/channels/{channel_id}/messages", channel_id=world.channel)
    loose = await client.http.request(route, json={"content": "not enforced", "nonce": "abc123"})

    assert again.id == first.id and again.content == "once"
    assert elsewhere.id != first.id and int(loose["id"]) != first.id
    assert [m.content for m in fake.messages(world.channel)] == ["once", "not enforced"]
    assert fake.messages(world.channel)[0].nonce == "abc123"
    assert fake.stored[str(first.id)]["nonce"] == "abc123"
    assert fake.nonce_replays == [str(first.id)]
    assert first.nonce == "abc123"
    fetched = await channel.fetch_message(first.id)
    assert fetched.nonce is None  # REST reads do not carry it
    with pytest.raises(discord.HTTPException) as too_long:
        await channel.send("x", nonce="n" * 26)
    assert too_long.value.code == 50035


# --- fatal gateway closes -----------------------------------------------------------------
FATAL = [(4004, discord.ConnectionClosed), (4010, discord.ConnectionClosed),
         (4011, discord.ConnectionClosed), (4012, discord.ConnectionClosed),
         (4013, discord.ConnectionClosed), (4014, discord.PrivilegedIntentsRequired)]


@pytest.mark.parametrize(("code", "raised"), FATAL)
async def test_a_fatal_close_at_identify_ends_connect(world: World, code: int,
                                                      raised: type[Exception]) -> None:
    fake = world.fake
    fake.refuse_identify(code)
    error = await connect_failure(fake)
    assert type(error) is raised
    if isinstance(error, discord.ConnectionClosed):
        assert error.code == code
    assert fake.close_codes == [code] and fake.identifies == 0
    fake.refuse_identify(None)
    async with logged_in(fake):
        assert fake.identifies == 1


@pytest.mark.parametrize(("code", "raised"), FATAL)
async def test_a_fatal_close_mid_session_ends_connect(world: World, code: int,
                                                      raised: type[Exception]) -> None:
    fake = world.fake
    error = await connect_failure(fake, after_ready=lambda: fake.close_gateway(code))
    assert type(error) is raised
    if isinstance(error, discord.ConnectionClosed):
        assert error.code == code
    assert fake.close_codes == [code] and fake.resumes == 0


async def test_a_close_that_is_not_fatal_is_resumed(world: World, client: Watcher) -> None:
    fake = world.fake
    await fake.close_gateway(4000)
    await fake.wait_resumed(1)
    await fake.user_message(world.dm, "still here", author_id=USER)
    assert [m.content for m in await received(client, 1)] == ["still here"]


# --- application flags --------------------------------------------------------------------
async def test_application_flags_read_back(world: World) -> None:
    fake = world.fake
    async with logged_in(fake) as client:
        flags = (await client.application_info()).flags
        assert flags.gateway_message_content_limited and not flags.gateway_message_content
        assert client.application_flags.gateway_message_content_limited  # from READY
    fake.set_message_content_intent(True, limited=False)
    fake.set_message_content_intent(False)
    async with logged_in(fake, Watcher(message_content=False)) as client:
        flags = (await client.application_info()).flags
        assert not (flags.gateway_message_content or flags.gateway_message_content_limited)
        assert flags.gateway_guild_members_limited  # the other switches stay


async def test_without_the_intent_guild_content_is_hidden_unless_mentioned(
        world: World) -> None:
    fake = world.fake
    fake.set_message_content_intent(False)
    assert type(await connect_failure(fake)) is discord.PrivilegedIntentsRequired
    assert fake.close_codes == [4014]
    async with logged_in(fake, Watcher(message_content=False)) as client:
        plain = await fake.user_message(world.channel, "hidden", author_id=USER,
                                        attachments=[("a.txt", b"a")])
        await fake.user_message(world.channel, "for the bot", author_id=USER,
                                mentions_bot=True)
        await fake.user_message(world.dm, "private", author_id=USER)
        hidden, mention, dm = await received(client, 3)
        fetched = await text_channel(client, world.channel).fetch_message(int(plain))
    assert (hidden.content, hidden.attachments) == ("", [])
    assert mention.content == f"<@{BOT_ID}> for the bot" and dm.content == "private"
    assert (fetched.content, fetched.attachments) == ("", [])  # REST reads too


# --- registered commands ------------------------------------------------------------------
async def test_commands_removed_on_discords_side_are_gone_until_synced_again(
        world: World, client: Watcher) -> None:
    tree = app_commands.CommandTree(client)

    @tree.command(description="Ask something")
    async def ask(interaction: discord.Interaction) -> None: ...

    await tree.sync()
    assert [c.name for c in await tree.fetch_commands()] == ["ask"]
    removed = world.fake.delete_registered_commands()
    assert [c["name"] for c in removed] == ["ask"]
    assert await tree.fetch_commands() == []
    await tree.sync()
    assert [c.name for c in await tree.fetch_commands()] == ["ask"]


# --- REST outages and late answers --------------------------------------------------------
async def test_an_outage_answers_its_status_then_recovers(world: World,
                                                          client: Watcher) -> None:
    fake = world.fake
    channel = text_channel(client, world.channel)
    fake.fail_for(f"/channels/{world.channel}/messages", 503, 0.3)
    with pytest.raises(discord.DiscordServerError) as down:
        await channel.send("during")
    assert down.value.status == 503 and "Service Unavailable" in down.value.text
    await asyncio.sleep(0.35)
    await channel.send("after")
    assert [m.content for m in fake.messages(world.channel)] == ["after"]
    assert [status for _, status, _ in fake.outage_answers] == [503]


async def test_discord_py_waits_out_a_short_502(world: World, client: Watcher) -> None:
    fake = world.fake
    fake.fail_for("/messages", 502, 0.2)
    started = time.monotonic()
    await text_channel(client, world.channel).send("retried")  # discord.py sleeps 1 s
    assert time.monotonic() - started >= 1.0
    assert [m.content for m in fake.messages()] == ["retried"]
    assert len(fake.outage_answers) == 1


async def test_a_late_answer_comes_after_the_message_exists(world: World,
                                                            client: Watcher) -> None:
    fake = world.fake
    fake.answer_late(f"/channels/{world.channel}/messages", 0.4)
    started = time.monotonic()
    sent = await text_channel(client, world.channel).send("slow")
    answered = time.monotonic()
    assert answered - started >= 0.4
    assert [m.id for m in fake.messages(world.channel)] == [str(sent.id)]
    [(echo, echoed)] = client.echoes
    assert echo.id == sent.id and echoed < answered - 0.3  # the echo came first
    assert fake.late_answers == [(f"/api/v10/channels/{world.channel}/messages", 0.4)]
