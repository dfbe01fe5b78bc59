"""Ordinary texts that mention secrets without holding one: tutorials, code with password
parameters, shell sessions, config docs with placeholders, prose about tokens and keys.
Redaction should leave them as they are (tests/agent/test_redact_forms.py)."""

from __future__ import annotations

BENIGN: tuple[str, ...] = (
    "def login(user, password: str) -> bool:\n    token = get_token()\n"
    "    return check(user, password, token)",
    "Password: choose a long one, at least twelve characters, and never reuse it.",
    "@dataclass\nclass Settings:\n    api_key: str = \"\"\n    timeout: float = 30.0\n"
    "    token: str | None = None",
    "client = connect(host='db', user='app', password=None, sslmode='require')",
    "# config.yaml\nservice:\n  url: https://api.example.com\n  secret: <your-secret-here>\n"
    "  retries: 3",
    "# .env.example\nAPI_KEY=changeme\nDB_PASSWORD=xxxx\nGITHUB_TOKEN=${GITHUB_TOKEN}\n"
    "SECRET_KEY=<generate-one>",
    "$ export OPENAI_API_KEY=\"$(pass show openai/api-key)\"\n$ python chat.py --model gpt-4o",
    "Rotate your API keys every 90 days, and never commit tokens or passwords to git: use a "
    "secret manager and reference the key by name.",
    "Send the `Authorization: Bearer <token>` header, where <token> is your personal access "
    "token from the settings page.",
    "curl -H \"Authorization: Bearer $TOKEN\" https://api.example.com/v1/me | jq .name",
    "`auth: basic` turns on basic auth; `auth: none` turns it off. The token: a short-lived "
    "credential the server hands you after login.",
    '{"type": "object", "properties": {"password": {"type": "string", "minLength": 12}, '
    '"token": {"type": "string"}}}',
    "SECRET_KEY = os.environ[\"DJANGO_SECRET_KEY\"]\nDEBUG = False\n"
    "ALLOWED_HOSTS = [\"example.com\"]",
    "token = request.headers.get(\"X-Token\")\nif not token:\n    raise PermissionError("
    "\"token: missing\")",
    "docker run -e POSTGRES_PASSWORD=$POSTGRES_PASSWORD -p 5432:5432 postgres:16",
    "2024-05-01 12:00:01 INFO auth: login succeeded for user alice (2fa ok)",
    "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\ndata:\n  LOG_LEVEL: debug\n"
    "  FEATURES: search,export",
    "interface Credentials {\n  username: string;\n  password: string;\n  token?: string;\n}",
    "fn connect(url: &str, password: &str) -> Result<Conn, Error> {\n    todo!()\n}",
    "max_tokens: 1024, temperature: 0.2, top_p: 0.9, stop: [\"\\n\\n\"]",
    "git clone git@github.com:acme/app.git && cd app && make test",
    "print(f\"token: {token[:4]}...\")  # never log the whole token",
    "Use `password = getpass.getpass()` so the password is not echoed; see the docs.",
    "env:\n  GITHUB_TOKEN: ${{ secrets.GITHUB_TOKEN }}\n  NPM_TOKEN: ${{ secrets.NPM_TOKEN }}",
    "ansible_become_password: \"{{ vault_become_pass }}\"\nansible_user: deploy",
    "variable \"db_password\" {\n  type      = string\n  sensitive = true\n}",
    "ALTER USER app WITH PASSWORD 'new-password-here';",
    "const token = await getToken();\nconst password = process.env.DB_PASSWORD;",
    "docker exec -u 1000:1000 app ls -la /srv && sort -u names.txt",
    "A JWT has three parts: header, payload and signature, each base64url-encoded and "
    "joined by dots.",
)
