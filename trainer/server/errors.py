"""One error type for every refusal the server answers, each with its HTTP status and a stable code."""

from __future__ import annotations


class ServiceError(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


def bad_request(message: str, code: str = "bad_request") -> ServiceError:
    return ServiceError(400, code, message)


def not_found(message: str, code: str = "not_found") -> ServiceError:
    return ServiceError(404, code, message)


def conflict(message: str, code: str = "conflict") -> ServiceError:
    return ServiceError(409, code, message)
