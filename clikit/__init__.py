"""A component's CLI built from its one pydantic settings model, so every default lives in one place.

    class ServeSettings(BaseSettings):
        model_config = SettingsConfigDict(env_prefix="DFLASH_PROXY_")
        port: int = Field(8100, description="Port to listen on.")

    @app.command()
    @settings_command(ServeSettings)
    def serve(settings: ServeSettings) -> None: ...

Each field becomes `--field-name` with the field's description as help and its environment variable
(`env_prefix` + NAME) shown and read. Options are passed to the model only when given on the command line or
in the environment, so the model's own default and validators decide everything else. A validation error
names the option, where its value came from (command line, environment) and why, then exits 2.
"""

from clikit.command import SettingsError, settings_command, source_of

__all__ = ["SettingsError", "settings_command", "source_of"]
