"""repos: the test command of repos.yaml's `test:` (issue 14)

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01 18:10:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("repos") as batch:
        batch.add_column(sa.Column("test_command", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("repos") as batch:
        batch.drop_column("test_command")
