"""Files on disk: TFRecord framing, the record format, images, folders, the writer, export and inspect."""
