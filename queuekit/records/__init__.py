"""Files on disk: TFRecord framing, records, images, folders, the writer, export, inspect."""
