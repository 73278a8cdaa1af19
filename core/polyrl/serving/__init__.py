"""The pieces of ``polyrl serve`` that keep it answering under hostile or heavy load.

``api_error`` (the OpenAI error shape), ``limits`` (caps checked before anything is allocated),
``requests`` (request bodies validated into sampling settings and prompts), ``scheduler`` (the
bounded, fair queue in front of the one generation thread), ``connections`` (connection cap and
read deadlines) and ``weight_push`` (the shared secret and the payload checks).
"""
