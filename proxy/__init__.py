"""The logging proxy between coding agents and the target model's endpoint."""
