"""What a user does with a run's outputs once it trained: list, download, export, serve and try them."""
