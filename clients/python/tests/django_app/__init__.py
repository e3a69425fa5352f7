"""A minimal Django project for the middleware's tests: settings made by the test, three views."""
