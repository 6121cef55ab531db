"""sessions: test outcome before/after the patch, resolved, environment (issue 14)

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01 15:20:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("sessions") as batch:
        batch.add_column(sa.Column("test_baseline", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("test_after", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("resolved", sa.Boolean(), nullable=True))
        batch.add_column(sa.Column("environment", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("sessions") as batch:
        batch.drop_column("environment")
        batch.drop_column("resolved")
        batch.drop_column("test_after")
        batch.drop_column("test_baseline")
