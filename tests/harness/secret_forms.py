"""Realistic secret forms (the ordinary texts are in tests/harness/benign_texts.py).

`FORMS` are the shapes people paste into a chat or a tool prints: keys of cloud providers
and services, URLs and command lines with credentials, private keys, service-account JSON,
`.env` lines, Kubernetes Secrets, and secrets wrapped across lines. Every value is made up:
generated from a fixed seed in each vendor's alphabet and length, so no scanner takes the
source for a live key and the forms are the same on every run. `Form.secrets` are each
form's distinctive parts: the form is caught when none of them is left in an output.
"""

from __future__ import annotations

import base64
import random
import string
from collections.abc import Callable
from dataclasses import dataclass

_RANDOM = random.Random(35)
_LOWER_HEX = "0123456789abcdef"
_ALNUM = string.ascii_letters + string.digits
_B64 = _ALNUM + "+/"
_URLSAFE = _ALNUM + "-_"
_UPPER_NUM = string.ascii_uppercase + string.digits


def _r(n: int, alphabet: str = _ALNUM) -> str:
    return "".join(_RANDOM.choice(alphabet) for _ in range(n))


def _b64(n: int) -> str:
    return base64.b64encode(_RANDOM.randbytes(n)).decode()


def _pem_body(lines: int = 4) -> list[str]:
    return [_b64(48) for _ in range(lines)]


@dataclass(frozen=True)
class Form:
    name: str
    text: str
    secrets: tuple[str, ...]


_Add = Callable[..., None]  # add(name, text, *distinctive parts)


def _pem(label: str, body: list[str], end: bool = True, sep: str = "\n") -> str:
    lines = [f"-----BEGIN {label}-----", *body]
    if end:
        lines.append(f"-----END {label}-----")
    return sep.join(lines)


def _cloud_aws(add: _Add) -> None:
    akia, aws_secret = "AKIA" + _r(16, _UPPER_NUM), _r(40, _B64)
    add("aws_credentials_file", f"[default]\naws_access_key_id = {akia}\n"
        f"aws_secret_access_key = {aws_secret}\nregion = eu-west-1", akia, aws_secret)
    aws_env = _r(40, _B64)
    add("aws_secret_env", f"export AWS_SECRET_ACCESS_KEY={aws_env}", aws_env)
    asia, sts_secret, session = "ASIA" + _r(16, _UPPER_NUM), _r(40, _B64), \
        "IQoJb3JpZ2luX2VjE" + _r(200, _B64)
    add("aws_sts_json", f'{{"Credentials": {{"AccessKeyId": "{asia}", "SecretAccessKey": '
        f'"{sts_secret}", "SessionToken": "{session}", "Expiration": "2025-01-01T00:00:00Z"}}}}',
        asia, sts_secret, session[:40])
    presign_key, signature = "AKIA" + _r(16, _UPPER_NUM), _r(64, _LOWER_HEX)
    add("aws_presigned_url", "https://acme-reports.s3.amazonaws.com/q3.pdf?X-Amz-Algorithm="
        f"AWS4-HMAC-SHA256&X-Amz-Credential={presign_key}%2F20240501%2Fus-east-1%2Fs3%2F"
        "aws4_request&X-Amz-Date=20240501T120000Z&X-Amz-Expires=3600&X-Amz-SignedHeaders=host"
        f"&X-Amz-Signature={signature}", presign_key, signature)


def _cloud_google(add: _Add) -> None:
    aiza = "AIza" + _r(35, _URLSAFE)
    add("gcp_api_key_in_url",
        f"GET https://maps.googleapis.com/maps/api/geocode/json?address=Paris&key={aiza}", aiza)
    key_id, sa_body = _r(40, _LOWER_HEX), _pem_body(6)
    sa = ('{\n  "type": "service_account",\n  "project_id": "acme-prod",\n'
          f'  "private_key_id": "{key_id}",\n  "private_key": "'
          + _pem("PRIVATE KEY", sa_body, sep="\\n") + '\\n",\n'
          '  "client_email": "deploy@acme-prod.iam.gserviceaccount.com",\n'
          '  "client_id": "104512345678901234567"\n}')
    add("gcp_service_account_json", sa, key_id, *sa_body)
    cut_body = _pem_body(5)
    add("gcp_service_account_cut_off", '{"type": "service_account", "private_key": "'
        + _pem("PRIVATE KEY", cut_body, end=False, sep="\\n"), *cut_body)
    gocspx = "GOCSPX-" + _r(28, _URLSAFE)
    add("google_oauth_client_secret", f"the OAuth client secret is {gocspx} (web app)", gocspx)
    ya29 = "ya29.a0" + _r(150, _URLSAFE)
    add("google_access_token", f"got access token {ya29} expires in 3599", ya29)
    refresh = "1//0g" + _r(100, _URLSAFE)
    add("google_refresh_token", f"refresh with {refresh} next time", refresh)


def _cloud_azure_digitalocean(add: _Add) -> None:
    account_key = _b64(64)
    add("azure_storage_connection_string", "DefaultEndpointsProtocol=https;AccountName=acme"
        f"prod;AccountKey={account_key};EndpointSuffix=core.windows.net", account_key)
    sas = _b64(32).replace("+", "%2B").replace("/", "%2F").replace("=", "%3D")
    add("azure_sas_url", "https://acmeprod.blob.core.windows.net/backups/db.bak?sv=2022-11-"
        "02&ss=b&srt=o&sp=r&se=2025-06-01T00:00:00Z&spr=https" f"&sig={sas}", sas)
    azure_secret = _r(3) + "8Q~" + _r(34, _URLSAFE.replace("-", "~."))
    add("azure_client_secret", f"new client secret value: {azure_secret}", azure_secret)
    sb_key = _b64(32)
    add("azure_service_bus", "Endpoint=sb://acme.servicebus.windows.net/;SharedAccessKeyName="
        f"RootManageSharedAccessKey;SharedAccessKey={sb_key}", sb_key)
    cosmos = _b64(64)
    add("azure_cosmos", "AccountEndpoint=https://acme.documents.azure.com:443/;"
        f"AccountKey={cosmos};", cosmos)
    dop = "dop_v1_" + _r(64, _LOWER_HEX)
    add("digitalocean", f"doctl auth init --access-token {dop}", dop)


def _ai_providers(add: _Add) -> None:
    proj = "sk-proj-" + _r(48, _URLSAFE) + "T3BlbkFJ" + _r(48, _URLSAFE)
    add("openai_project", f'client = OpenAI(api_key="{proj}")', proj)
    ant = "sk-ant-api03-" + _r(93, _URLSAFE) + "-" + _r(6) + "AA"
    add("anthropic_header", f"x-api-key: {ant}", ant)
    admin = "sk-ant-admin01-" + _r(93, _URLSAFE) + "AA"
    add("anthropic_admin", f"admin key {admin} for the org", admin)
    hf = "hf_" + _r(34)
    add("huggingface", f"huggingface-cli login --token {hf}", hf)
    gsk = "gsk_" + _r(52)
    add("groq", f"GROQ key {gsk}", gsk)
    xai = "xai-" + _r(80)
    add("xai", f"curl https://api.x.ai/v1/chat -H 'x-key: {xai}'", xai)
    r8 = "r8_" + _r(37)
    add("replicate", f"using replicate token {r8} now", r8)
    pplx = "pplx-" + _r(48)
    add("perplexity", f"pplx key is {pplx}", pplx)
    orouter = "sk-or-v1-" + _r(64, _LOWER_HEX)
    add("openrouter", f"OPENROUTER key {orouter}", orouter)


def _code_hosting_packages(add: _Add) -> None:
    ghp = "ghp_" + _r(36)
    add("github_token_in_clone_url", f"git clone https://{ghp}@github.com/acme/app.git", ghp)
    gh_fine = "github_pat_11" + _r(20, _UPPER_NUM) + "_" + _r(59)
    add("github_fine_grained", f'{{"token": "{gh_fine}", "scopes": ["repo"]}}', gh_fine)
    ghs = "ghs_" + _r(36)
    add("github_app_url", f"remote: https://x-access-token:{ghs}@github.com/acme/app", ghs)
    glpat = "glpat-" + _r(20, _URLSAFE)
    add("gitlab_header", f"curl --header 'PRIVATE-TOKEN: {glpat}' https://gitlab.com/api/v4",
        glpat)
    glrt = "glrt-" + _r(20, _URLSAFE)
    add("gitlab_runner", f"gitlab-runner register --token {glrt}", glrt)
    gldt = "gldt-" + _r(20, _URLSAFE)
    add("gitlab_deploy_token", f"deploy token {gldt} (read_registry)", gldt)
    npm = "npm_" + _r(36)
    add("npmrc", f"//registry.npmjs.org/:_authToken={npm}", npm)
    npm2 = "npm_" + _r(36)
    add("npm_in_prose", f"publish with {npm2} then revoke", npm2)
    pypi = "pypi-AgEIcHlwaS5vcmc" + _r(60, _URLSAFE)
    add("pypirc", f"[pypi]\n  username = __token__\n  password = {pypi}", pypi)
    pypi2 = "pypi-AgEIcHlwaS5vcmc" + _r(60, _URLSAFE)
    add("twine_flag", f"twine upload -u __token__ -p {pypi2} dist/*", pypi2)
    dckr = "dckr_pat_" + _r(27, _URLSAFE)
    add("docker_hub", f"echo {dckr} | docker login -u acme --password-stdin", dckr)


def _secrets_managers_infra(add: _Add) -> None:
    hvs = "hvs." + _r(90, _URLSAFE)
    add("vault_login", f"vault login {hvs}", hvs)
    atlas_id, atlas = _r(14), _r(67, _URLSAFE)
    add("terraform_cloud", f"TFC token {atlas_id}.atlasv1.{atlas}", atlas)
    pul = "pul-" + _r(40, _LOWER_HEX)
    add("pulumi", f"pulumi login with {pul}", pul)
    hrku = "HRKU-AA" + _r(58, _URLSAFE)
    add("heroku_key", f"heroku token {hrku}", hrku)
    heroku_uuid = f"{_r(8, _LOWER_HEX)}-{_r(4, _LOWER_HEX)}-{_r(4, _LOWER_HEX)}-" \
        f"{_r(4, _LOWER_HEX)}-{_r(12, _LOWER_HEX)}"
    add("netrc_heroku", f"machine api.heroku.com\n  login me@acme.io\n  password {heroku_uuid}",
        heroku_uuid)
    dapi = "dapi" + _r(32, _LOWER_HEX)
    add("databricks", f"host = https://acme.cloud.databricks.com\ntoken {dapi}-2", dapi)
    doppler = "dp.st.prd." + _r(40)
    add("doppler", f"doppler run --token {doppler} -- ./start", doppler)


def _work_tools(add: _Add) -> None:
    atatt = "ATATT3xFfGF0" + _r(180, _URLSAFE) + "=" + _r(8, _LOWER_HEX.upper())
    add("atlassian", f"curl -u me@acme.io:{atatt} https://acme.atlassian.net/rest/api/3/myself",
        atatt)
    lin = "lin_api_" + _r(40)
    add("linear", f"Authorization header value {lin}", lin)
    notion = "secret_" + _r(43)
    add("notion_legacy", f"notion integration {notion}", notion)
    ntn = "ntn_" + _r(46)
    add("notion", f"NOTION token {ntn}", ntn)
    pmak = f"PMAK-{_r(24, _LOWER_HEX)}-{_r(34, _LOWER_HEX)}"
    add("postman", f"postman api key: {pmak}", pmak)
    airtable = "pat" + _r(14) + "." + _r(64, _LOWER_HEX)
    add("airtable", f"airtable PAT {airtable}", airtable)


def _observability(add: _Add) -> None:
    glsa = f"glsa_{_r(32)}_{_r(8, _LOWER_HEX)}"
    add("grafana", f"grafana service account token {glsa}", glsa)
    nrak = "NRAK-" + _r(27, _UPPER_NUM)
    add("new_relic", f"NEW_RELIC user key {nrak}", nrak)
    sntrys = "sntrys_eyJpYXQiOjE3MDAwMDAwMDB9" + _r(60, _URLSAFE) + "_" + _r(43)
    add("sentry_token", f"SENTRY auth {sntrys}", sntrys)
    dsn_key = _r(32, _LOWER_HEX)
    add("sentry_dsn", f"sentry_sdk.init(dsn='https://{dsn_key}@o450123.ingest.sentry.io/5512')",
        dsn_key)


def _chat_mail(add: _Add) -> None:
    xoxb = f"xoxb-{_r(12, string.digits)}-{_r(13, string.digits)}-{_r(24)}"
    add("slack_bot", f'{{"ok": true, "access_token": "{xoxb}"}}', xoxb)
    xoxp = f"xoxp-{_r(12, string.digits)}-{_r(12, string.digits)}-{_r(13, string.digits)}-" \
        f"{_r(32, _LOWER_HEX)}"
    add("slack_user", f"user token {xoxp}", xoxp)
    hook = f"T{_r(8, _UPPER_NUM)}/B{_r(10, _UPPER_NUM)}/{_r(24)}"
    add("slack_webhook", f"curl -X POST -d @msg.json https://hooks.slack.com/services/{hook}",
        hook.split("/")[-1])
    xapp = f"xapp-1-A{_r(10, _UPPER_NUM)}-{_r(13, string.digits)}-{_r(64, _LOWER_HEX)}"
    add("slack_app_level", f"SLACK_APP_TOKEN is {xapp}", xapp)
    discord_id = base64.b64encode(_r(18, string.digits).encode()).decode().rstrip("=")
    discord_bot = f"{discord_id}.{_r(6, _URLSAFE)}.{_r(38, _URLSAFE)}"
    add("discord_bot", f"bot.run('{discord_bot}')", discord_bot)
    dwh = _r(68, _URLSAFE)
    add("discord_webhook",
        f"POST https://discord.com/api/webhooks/{_r(19, string.digits)}/{dwh}", dwh)
    dwh2 = _r(68, _URLSAFE)
    add("discordapp_webhook",
        f"hook = 'https://discordapp.com/api/webhooks/{_r(18, string.digits)}/{dwh2}'", dwh2)
    tg = f"{_r(10, string.digits)}:AA{_r(33, _URLSAFE)}"
    add("telegram_bot_url", f"GET https://api.telegram.org/bot{tg}/getUpdates", tg)
    teams = _r(32, _LOWER_HEX)
    add("teams_webhook", f"https://acme.webhook.office.com/webhookb2/{_r(8, _LOWER_HEX)}-aaaa-"
        f"bbbb-cccc-{_r(12, _LOWER_HEX)}@{_r(8, _LOWER_HEX)}/IncomingWebhook/{teams}/x", teams)
    tw_sid, tw_token = "AC" + _r(32, _LOWER_HEX), _r(32, _LOWER_HEX)
    add("twilio_curl", f"curl -X POST https://api.twilio.com/2010-04-01/Accounts/{tw_sid}/"
        f"Messages.json -u {tw_sid}:{tw_token}", tw_token)
    tw_sk = "SK" + _r(32, _LOWER_HEX)
    add("twilio_api_key", f"twilio api key sid {tw_sk}", tw_sk)
    sg = f"SG.{_r(22, _URLSAFE)}.{_r(43, _URLSAFE)}"
    add("sendgrid", f"sg = SendGridAPIClient('{sg}')", sg)
    mg = "key-" + _r(32, _LOWER_HEX)
    add("mailgun", f"curl -s --user 'api:{mg}' https://api.mailgun.net/v3/acme/messages", mg)
    mc = _r(32, _LOWER_HEX) + "-us21"
    add("mailchimp", f"mailchimp key {mc}", mc)


def _payments_commerce(add: _Add) -> None:
    sk_live = "sk_live_" + _r(99)
    add("stripe_live", f"stripe.api_key = '{sk_live}'", sk_live)
    rk = "rk_live_" + _r(99)
    add("stripe_restricted", f"restricted key {rk}", rk)
    whsec = "whsec_" + _r(32)
    add("stripe_webhook_secret", f"endpoint secret {whsec}", whsec)
    square = "EAAA" + _r(60, _URLSAFE)
    add("square", f"square access token {square}", square)
    sq0 = "sq0csp-" + _r(43, _URLSAFE)
    add("square_oauth", f"application secret {sq0}", sq0)
    shpat = "shpat_" + _r(32, _LOWER_HEX)
    add("shopify", f"X-Shopify-Access-Token: {shpat}", shpat)


def _urls_with_credentials(add: _Add) -> None:
    pg = _r(20)
    add("postgres_url", f"DATABASE_URL=postgres://app:{pg}@db.internal:5432/app", pg)
    mongo = _r(16)
    add("mongodb_srv", f"mongodb+srv://admin:{mongo}@cluster0.ab1cd.mongodb.net/test", mongo)
    redis = _r(24)
    add("redis_url", f"redis://default:{redis}@redis-12345.c1.cloud.redislabs.com:12345", redis)
    amqp = _r(18)
    add("amqp_url", f"amqps://worker:{amqp}@rabbit.acme.io/vhost", amqp)
    jdbc = _r(12) + "!"
    add("jdbc", f"jdbc:postgresql://db:5432/app?user=app&password={jdbc}&ssl=true", jdbc)
    odbc = _r(10) + "#1"
    add("sql_server", f"Server=tcp:acme.database.windows.net,1433;Database=app;User ID=app;"
        f"Password={odbc};Encrypt=true;", odbc)
    cld = _r(27, _URLSAFE)
    add("cloudinary_url", f"CLOUDINARY_URL=cloudinary://{_r(15, string.digits)}:{cld}@acme",
        cld)


def _env_config_files(add: _Add) -> None:
    add("dotenv_short_password", "DB_HOST=db\nDB_USER=app\nDB_PASSWORD=hunter2\nDB_PORT=5432",
        "hunter2")
    add("dotenv_plain_word", "SMTP_USER=mailer\nSMTP_PASSWORD=sunshine", "sunshine")
    add("yaml_password", "database:\n  user: app\n  password: tr0ub4dor&3\n  host: db",
        "tr0ub4dor&3")
    django = "django-insecure-" + _r(50, string.ascii_lowercase + string.digits + "!@#%^*(-_=+)")
    add("django_settings", f"SECRET_KEY = '{django}'", django)
    rails = _r(128, _LOWER_HEX)
    add("rails_env", f"SECRET_KEY_BASE={rails}", rails)
    wg = _b64(32)
    add("wireguard", f"[Interface]\nPrivateKey = {wg}\nAddress = 10.0.0.2/32", wg)
    compose = _r(14)
    add("docker_compose_env", f"    environment:\n      - POSTGRES_PASSWORD={compose}\n"
        "      - POSTGRES_DB=app", compose)
    dd_app = _r(40, _LOWER_HEX)
    add("datadog_app_key", f"DD_APP_KEY={dd_app}", dd_app)
    maven = _r(16)
    add("maven_settings", f"<server>\n  <id>nexus</id>\n  <username>ci</username>\n"
        f"  <password>{maven}</password>\n</server>", maven)


def _jwts(add: _Add) -> None:
    jwt_sig = _r(43, _URLSAFE)
    jwt = "eyJhbGciOiJSUzI1NiIsImtpZCI6IjEifQ.eyJzdWIiOiIxMjM0NSIsImV4cCI6MTcwMDAwMDAwMH0." \
        + jwt_sig
    add("jwt_cookie", f"Cookie: theme=dark; session={jwt}", jwt_sig)
    jwt2_sig = _r(43, _URLSAFE)
    add("jwt_url_encoded", "https://app.acme.io/callback?state=x%26id_token%3DeyJhbGciOiJIUzI1"
        f"NiJ9.eyJzdWIiOiJhIn0.{jwt2_sig}", jwt2_sig)
    jwt3_sig = _r(43, _URLSAFE)
    add("jwt_empty_payload", f"token eyJhbGciOiJIUzI1NiJ9.e30.{jwt3_sig} was rejected",
        jwt3_sig)
    jwe = f"eyJhbGciOiJkaXIiLCJlbmMiOiJBMjU2R0NNIn0..{_r(16, _URLSAFE)}.{_r(80, _URLSAFE)}." \
        f"{_r(22, _URLSAFE)}"
    add("jwe_compact", f"encrypted session {jwe}", jwe.split(".")[3])
    bearer = _r(40, _URLSAFE)
    add("bearer_header", f"curl -H 'Authorization: Bearer {bearer}' https://api.acme.io", bearer)
    basic = base64.b64encode(f"admin:{_r(12)}".encode()).decode()
    add("basic_header", f"Authorization: Basic {basic}", basic)


def _private_keys(add: _Add) -> None:
    for label in ("RSA PRIVATE KEY", "OPENSSH PRIVATE KEY", "EC PRIVATE KEY", "DSA PRIVATE KEY",
                  "ENCRYPTED PRIVATE KEY", "PGP PRIVATE KEY BLOCK"):
        body = _pem_body()
        add(f"pem_{label.split()[0].lower()}", f"here is the key:\n{_pem(label, body)}\nthanks",
            *body)
    open_body = _pem_body()
    add("pem_unterminated", _pem("OPENSSH PRIVATE KEY", open_body, end=False), *open_body)
    yaml_body = _pem_body()
    add("pem_in_yaml_block", "tls:\n  key: |\n    " + _pem("EC PRIVATE KEY", yaml_body,
                                                         end=False, sep="\n    "), *yaml_body)
    one_line = _pem_body()
    add("pem_on_one_line", 'PRIVATE_KEY="' + _pem("RSA PRIVATE KEY", one_line, end=False,
                                                  sep=" ") + '"', *one_line)
    putty = _pem_body(3)
    add("putty_key", "PuTTY-User-Key-File-3: ssh-ed25519\nEncryption: none\nComment: deploy\n"
        "Public-Lines: 2\nAAAAC3NzaC1lZDI1NTE5AAAAIOm\nx9k2\nPrivate-Lines: 3\n"
        + "\n".join(putty) + f"\nPrivate-MAC: {_r(64, _LOWER_HEX)}", *putty)
    age = "AGE-SECRET-KEY-1" + _r(58, "QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L")
    add("age_key", f"# created: 2024-05-01\n{age}", age)


def _kubernetes(add: _Add) -> None:
    k8s_user, k8s_pass = base64.b64encode(b"admin").decode(), _b64(18)
    k8s_tls = _b64(60)
    add("k8s_secret_yaml", "apiVersion: v1\nkind: Secret\nmetadata:\n  name: db-creds\n"
        f"type: Opaque\ndata:\n  username: {k8s_user}\n  db.password: {k8s_pass}\n"
        f"  tls.key: {k8s_tls}\n", k8s_pass, k8s_tls)
    k8s_json = _b64(30)
    add("k8s_secret_json", '{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x"},'
        f' "data": {{".dockerconfigjson": "{k8s_json}"}}}}', k8s_json)
    kube_key = base64.b64encode(("-----BEGIN RSA PRIVATE KEY-----\n" + _b64(60)).encode()
                                ).decode()
    add("kubeconfig_client_key", f"users:\n- name: admin\n  user:\n    client-key-data: "
        f"{kube_key}", kube_key[40:])
    sa_token = "eyJhbGciOiJSUzI1NiIsImtpZCI6IiJ9." + _r(300, _URLSAFE) + "." + _r(342, _URLSAFE)
    add("kubeconfig_token", f"    token: {sa_token}", sa_token[40:80])
    docker_auth = base64.b64encode(f"acme:{_r(20)}".encode()).decode()
    add("docker_config", f'{{"auths": {{"ghcr.io": {{"auth": "{docker_auth}"}}}}}}', docker_auth)


def _split_across_lines(add: _Add) -> None:
    wrapped = "ghp_" + _r(36)
    add("token_wrapped_with_backslash", f"export GITHUB_TOKEN={wrapped[:18]}\\\n"
        f"{wrapped[18:]}", wrapped[18:])
    wrapped_vendor = "sk-proj-" + _r(60, _URLSAFE)
    add("key_wrapped_mid_prefix", f"OPENAI=sk\\\n{wrapped_vendor[2:]}", wrapped_vendor[12:])
    quoted_wrap = _r(40, _B64)
    add("quoted_value_wrapped", f'PRIVATE_KEY="{quoted_wrap[:20]}\\\n{quoted_wrap[20:]}"',
        quoted_wrap[20:])
    block = _r(24)
    add("yaml_block_scalar", f"db:\n  password: |\n    {block}\n  host: db", block)


def _command_lines(add: _Add) -> None:
    curl_pw = _r(14)
    add("curl_user", f"curl -u deploy:{curl_pw} https://ci.acme.io/api/json", curl_pw)
    mysql_pw = _r(10)
    add("mysql_flag", f"mysql -h db -u root -p{mysql_pw} shop", mysql_pw)
    flag_pw = _r(12)
    add("password_flag", f"psql --host db --password {flag_pw} app", flag_pw)


_FAMILIES = (_cloud_aws, _cloud_google, _cloud_azure_digitalocean, _ai_providers,
             _code_hosting_packages, _secrets_managers_infra, _work_tools, _observability,
             _chat_mail, _payments_commerce, _urls_with_credentials, _env_config_files, _jwts,
             _private_keys, _kubernetes, _split_across_lines, _command_lines)


def _forms() -> list[Form]:
    out: list[Form] = []
    for family in _FAMILIES:  # in this order: the seeded values stay the same
        family(lambda name, text, *secrets: out.append(Form(name, text, secrets)))
    return out


FORMS: tuple[Form, ...] = tuple(_forms())
