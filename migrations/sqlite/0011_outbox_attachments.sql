-- Files sent with a message: `[{filename, content_type, content}]`, the content in base64.
ALTER TABLE outbox_messages ADD COLUMN attachments TEXT NOT NULL DEFAULT '[]';
