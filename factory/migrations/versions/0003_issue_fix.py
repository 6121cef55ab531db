"""issues: the fix of a closed issue (merged pull request or closing commit, merge commit, files) (issue 14)

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01 15:40:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("issues") as batch:
        batch.add_column(sa.Column("fix", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("issues") as batch:
        batch.drop_column("fix")
