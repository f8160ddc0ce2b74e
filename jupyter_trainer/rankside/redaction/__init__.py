"""Secrets kept out of every record and message: which names are a secret's
(``secret_names.py``), credentials in URLs (``url_secrets.py``), and the one rule that
redacts values, objects and text with both (``redact.py``).
"""
